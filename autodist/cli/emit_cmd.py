"""``autodist emit PLAN``: Kubernetes manifests for a plan, optionally submitted."""

from __future__ import annotations

import sys

from autodist.errors import InputError


def add_manifest_arguments(parser):
    """Options shared by ``emit`` and ``plan --emit-k8s`` (Arena's names where it has the option)."""
    from launcher.options import (
        DEFAULT_BACKOFF_LIMIT,
        DEFAULT_IMAGE,
        DEFAULT_RDMA_RESOURCE,
        DEFAULT_RUNNING_TIMEOUT_S,
        DEFAULT_SHM_SIZE,
        DEFAULT_SOCKET_IFNAME,
        DEFAULT_TTL_AFTER_FINISHED_S,
        FORMATS,
        GANGS,
    )

    parser.add_argument("--format", choices=FORMATS, default="tfjob",
                        help="job kind: tfjob (Kubeflow training operator v1), mpijob (mpi-operator v2beta1, "
                             "allreduce plans) or trainjob (Kubeflow Trainer v2, allreduce plans; default tfjob)")
    parser.add_argument("--runtime", metavar="NAME",
                        help="with --format trainjob: the cluster's ClusterTrainingRuntime to use (default: emit "
                             "autodist's autodist-tensorflow[-GANG] runtime too)")
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"image with TensorFlow and autodist installed (default {DEFAULT_IMAGE}, "
        "built from the Dockerfile)"
    )
    parser.add_argument("--namespace", default="default", help="namespace of every object (default: default)")
    parser.add_argument("--name", help="job name, a DNS-1035 label (default: the plan's name)")
    parser.add_argument("--gang", choices=GANGS, help="gang-schedule the pods with this scheduler: the operator (started "
                        "with gang scheduling on) makes the job's PodGroup from the plan's minResources")
    parser.add_argument("--queue", help="scheduler queue of the job and its Volcano PodGroup")
    parser.add_argument("--priority", metavar="CLASS", help="PriorityClass of every pod and of the PodGroup")
    parser.add_argument("--script", help="training script, relative to the code folder /workspace (or absolute in the pod)")
    parser.add_argument("--script-args", default="", metavar="ARGS", help="the script's arguments, one string")
    parser.add_argument("--code-from", default="image", metavar="image|configmap|pvc:CLAIM:PATH",
                        help="where the pods find the script's folder: in the image's /workspace (default), a "
                             "ConfigMap of the local script's folder, or folder PATH of a PersistentVolumeClaim")
    parser.add_argument("--data", action="append", default=[], metavar="CLAIM:/PATH",
                        help="mount a PersistentVolumeClaim at PATH in every pod (repeatable)")
    parser.add_argument("--logdir", dest="log_dir", metavar="PATH",
                        help="TensorBoard log folder, given to the script as $AUTODIST_LOG_DIR (put it on a --data volume)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="environment variable (repeatable)")
    parser.add_argument("--image-pull-secret", action="append", default=[], dest="image_pull_secrets", metavar="SECRET",
                        help="secret for pulling the image (repeatable)")
    # Arena calls it --selector; in `plan` that already selects the nodes to discover.
    parser.add_argument("--node-selector", action="append", default=[], dest="node_selector", metavar="KEY=VALUE",
                        help="node label every pod requires (repeatable)")
    parser.add_argument("--toleration", action="append", default=[], dest="tolerations",
                        metavar="KEY[=VALUE][:EFFECT]|all", help="taint the pods tolerate (repeatable)")
    parser.add_argument("--cpu", help="CPU request and limit of each task's pod (default: 4 per device it holds)")
    parser.add_argument("--memory", help="memory request and limit of each task's pod (default: its share of 80%% "
                                         "of its node's host memory)")
    parser.add_argument("--shm-size", default=DEFAULT_SHM_SIZE, help=f"sizeLimit of /dev/shm (default {DEFAULT_SHM_SIZE})")
    parser.add_argument("--network", metavar="host|attachment:NAME",
                        help="for pods that use RDMA: the host network, or a Multus network attachment")
    parser.add_argument("--backoff-limit", type=int, default=DEFAULT_BACKOFF_LIMIT,
                        help=f"restarts before the job fails (default {DEFAULT_BACKOFF_LIMIT})")
    parser.add_argument("--running-timeout", default=str(DEFAULT_RUNNING_TIMEOUT_S), metavar="DURATION",
                        help=f"the job's deadline, seconds or with s, m, h, d (default {DEFAULT_RUNNING_TIMEOUT_S // 86400}d)")
    parser.add_argument("--ttl-after-finished", default=str(DEFAULT_TTL_AFTER_FINISHED_S), metavar="DURATION",
                        help=f"how long a finished job's pods are kept (default {DEFAULT_TTL_AFTER_FINISHED_S // 86400}d)")
    parser.add_argument(
        "--rdma-resource", default=DEFAULT_RDMA_RESOURCE, help=f"RDMA device-plugin resource (default {DEFAULT_RDMA_RESOURCE})"
    )
    parser.add_argument("--ib-hca", help="NCCL_IB_HCA, the RDMA adapters NCCL uses, e.g. '=mlx5_0,mlx5_3' (exact names, "
                                         "as ibv_devices lists them; default: '=mlx5_0,...', one per RDMA NIC of a node)")
    parser.add_argument(
        "--socket-ifname", default=DEFAULT_SOCKET_IFNAME, help=f"NCCL_SOCKET_IFNAME (default {DEFAULT_SOCKET_IFNAME!r})"
    )
    parser.add_argument("--force", action="store_true",
                        help="replace an output folder that holds files autodist did not emit")


def script_args_of(args):
    """``--script-args`` split as a shell would."""
    import shlex

    try:
        return tuple(shlex.split(args.script_args))
    except ValueError as exc:
        raise InputError(f"cannot split {args.script_args!r} ({exc})", field="--script-args") from None


# A ConfigMap of code holds text files up to this much in all (the object limit of launcher.manifests).
MAX_CODE_BYTES = 200 * 1024


def code_files_of(local_script):
    """(name, text) of every file beside ``local_script``, for ``--code-from configmap``."""
    import os

    folder = os.path.dirname(os.path.abspath(local_script))
    if not os.path.isfile(local_script):
        raise InputError("no such file (--code-from configmap packs the script's folder)", source=local_script)
    files, total = [], 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except UnicodeDecodeError:
            raise InputError("is not UTF-8 text; a ConfigMap of code holds text (use --code-from image or pvc)",
                             source=path) from None
        total += len(text.encode("utf-8"))
        files.append((name, text))
    if total > MAX_CODE_BYTES:
        raise InputError(f"holds {total} bytes, more than a ConfigMap of code may ({MAX_CODE_BYTES}); "
                         "use --code-from image or pvc", source=folder)
    return tuple(files)


def options_from_args(args, default_script=None):
    """EmitOptions from parsed arguments.

    ``default_script`` (the local script ``plan`` read) runs when ``--script``
    is not given; it is looked up by its file name in the pod's code folder.
    """
    import os

    from launcher.options import EmitOptions, parse_duration

    local_script = args.script or default_script
    script = args.script or (os.path.basename(default_script) if default_script else None)
    code_files = ()
    if args.code_from == "configmap" and local_script:
        code_files = code_files_of(local_script)
        script = os.path.basename(local_script)
    return EmitOptions(
        script=script,
        script_args=script_args_of(args),
        name=args.name,
        namespace=args.namespace,
        image=args.image,
        gang=args.gang,
        rdma_resource=args.rdma_resource,
        ib_hca=args.ib_hca,
        socket_ifname=args.socket_ifname,
        code_from=args.code_from,
        code_files=code_files,
        network=args.network,
        cpu=args.cpu,
        memory=args.memory,
        shm_size=args.shm_size,
        backoff_limit=args.backoff_limit,
        running_timeout=parse_duration(args.running_timeout, "--running-timeout"),
        ttl_after_finished=parse_duration(args.ttl_after_finished, "--ttl-after-finished"),
        queue=args.queue,
        priority=args.priority,
        data=tuple(args.data),
        image_pull_secrets=tuple(args.image_pull_secrets),
        env=tuple(args.env),
        selector=tuple(args.node_selector),
        tolerations=tuple(args.tolerations),
        log_dir=args.log_dir,
        runtime=args.runtime,
    ).check()


def manifests_for(plan, args, default_script=None):
    """The validated objects of ``plan`` for the parsed manifest options."""
    from launcher.manifests import build_manifests

    return build_manifests(plan, args.format, options_from_args(args, default_script))


def register(subparsers):
    p = subparsers.add_parser("emit", help="write (and submit) Kubernetes manifests for a plan")
    p.add_argument("plan", help="plan.json written by `autodist plan`")
    p.add_argument("-o", "--output", metavar="DIR", help="write the manifests here, one YAML file per kind, replacing an earlier emission (default: YAML on stdout)")
    add_manifest_arguments(p)
    p.add_argument("--submit", action="store_true",
                   help="apply the objects (server-side apply) to the cluster of the current kubeconfig; prints each "
                        "as created, configured or unchanged; all or nothing: a refused object removes the ones "
                        "this submit created")
    p.add_argument("--dry-run", action="store_true", help="with --submit: server-side dry run (dryRun=All)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.set_defaults(func=run)


def run(args):
    from autodist.plan import Plan
    from launcher.manifests import check_output_folder, to_yaml, write_manifests

    if args.dry_run and not args.submit:
        raise InputError("--dry-run needs --submit", field="--dry-run")
    options_from_args(args)  # bad options fail before the plan is read
    if args.output:
        check_output_folder(args.output, args.force)
    objects = manifests_for(Plan.load(args.plan), args)
    if args.output:
        for path in write_manifests(objects, args.output, force=args.force):
            print(path)
    elif not args.submit:
        sys.stdout.write(to_yaml(objects))
    if args.submit:
        from launcher.submit import submit

        from launcher.manifests import required_objects

        required = required_objects(args.format, options_from_args(args))
        for name, action in submit(objects, kubeconfig=args.kubeconfig, dry_run=args.dry_run, required=required):
            print(f"{name} {action}{' (dry run)' if args.dry_run else ''}")
    return 0
