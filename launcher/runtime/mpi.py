"""A replica started by ``mpirun`` (the MPIJob): its place from the MPI environment, not ``TF_CONFIG``.

The MPIJob's launcher runs one rank per GPU slot with ``-map-by slot``, so
rank ``r`` is slot ``r % slots`` of host ``r // slots`` in the hostfile the
mpi-operator writes.  The ranks are the plan's replicas in order; each
listens on ``AUTODIST_REPLICA_PORT`` (default 2222) plus its slot.
"""

from __future__ import annotations

from autodist.errors import LaunchError

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK")
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
HOSTFILE_VARIABLE = "OMPI_MCA_orte_default_hostfile"
DEFAULT_HOSTFILE = "/etc/mpi/hostfile"
DEFAULT_PORT = 2222


def _first(environ, names):
    for name in names:
        if name in environ:
            return name, environ[name]
    return None, None


def started_by_mpi(environ):
    """Whether this process is an MPI rank (its launcher set a rank variable)."""
    return _first(environ, RANK_VARIABLES)[0] is not None


def read_hostfile(path):
    """[(host, slots)] from an OpenMPI (``host slots=N``) or MPICH (``host:N``) hostfile."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.split("#", 1)[0].strip() for line in fh]
    except OSError as exc:
        raise LaunchError(f"cannot read the MPI hostfile ({exc.strerror})", source=path) from None
    hosts = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        host, slots = line.split()[0], 1
        if "slots=" in line:
            slots = line.split("slots=", 1)[1].split()[0]
        elif ":" in host:
            host, slots = host.rsplit(":", 1)
        try:
            hosts.append((host, int(slots)))
        except ValueError:
            raise LaunchError(f"line {number}: slots must be an integer, got {slots!r}", source=path) from None
    return hosts


def rank_and_cluster(environ):
    """(rank, local rank, the replicas' cluster) of this MPI rank."""
    name, rank = _first(environ, RANK_VARIABLES)
    path = environ.get(HOSTFILE_VARIABLE, DEFAULT_HOSTFILE)
    port = int(environ.get("AUTODIST_REPLICA_PORT", DEFAULT_PORT))
    addresses = [f"{host}:{port + i}" for host, slots in read_hostfile(path) for i in range(slots)]
    try:
        rank = int(rank)
    except ValueError:
        raise LaunchError(f"not an integer: {rank!r}", field=name) from None
    if not 0 <= rank < len(addresses):
        raise LaunchError(f"rank {rank} has no slot in the hostfile's {len(addresses)}", source=path)
    _, local = _first(environ, LOCAL_RANK_VARIABLES)
    return rank, int(local) if local is not None else 0, {"worker": addresses}
