# The image the emitted TFJob and MPIJob pods run: TensorFlow's CUDA image
# with autodist installed (the [gpu] extra keeps its full tensorflow build).
# Build and push it (from the repository root):
#   docker build -t REGISTRY/autodist:0.1.0 . && docker push REGISTRY/autodist:0.1.0
# then emit with --image REGISTRY/autodist:0.1.0.  Put the training code in
# /workspace (a Dockerfile FROM this one that copies it there), or mount it
# there with --code-from configmap or --code-from pvc:CLAIM:PATH.
FROM tensorflow/tensorflow:2.21.0-gpu

# OpenMPI's mpirun and an SSH server: an MPIJob's launcher starts the ranks
# over SSH on the worker pods.  gzip: the pods' init container unpacks the plan.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openmpi-bin openssh-server openssh-client gzip \
    && mkdir -p /run/sshd \
    && rm -rf /var/lib/apt/lists/*

# SSH as mpi-operator expects of its images (kubeflow/mpi-operator
# build/base/Dockerfile): the launcher trusts the worker pods' new host keys
# (StrictHostKeyChecking no), keeps no known_hosts in the read-only ~/.ssh
# the operator mounts from the job's Secret (UserKnownHostsFile /dev/null),
# and sshd accepts that mount's permissions (StrictModes no).  Ubuntu's
# ssh_config and sshd_config read these drop-in folders first.
RUN printf 'Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n' \
        > /etc/ssh/ssh_config.d/autodist-mpi.conf \
    && printf 'StrictModes no\n' > /etc/ssh/sshd_config.d/autodist-mpi.conf

COPY pyproject.toml README.md /src/
COPY autodist /src/autodist
COPY cost_models /src/cost_models
COPY placement /src/placement
COPY launcher /src/launcher
RUN python3 -m pip install --no-cache-dir "/src[gpu]" && rm -rf /src

WORKDIR /workspace
ENTRYPOINT ["autodist", "worker"]
