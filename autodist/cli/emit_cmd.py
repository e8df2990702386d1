"""``autodist emit PLAN``: Kubernetes manifests for a plan, optionally submitted."""

from __future__ import annotations

import sys

from autodist.errors import InputError


def add_manifest_arguments(parser):
    """Options shared by ``emit`` and ``plan --emit-k8s``."""
    from launcher.options import (
        DEFAULT_IB_HCA,
        DEFAULT_IMAGE,
        DEFAULT_RDMA_RESOURCE,
        DEFAULT_SOCKET_IFNAME,
        FORMATS,
        GANGS,
    )

    parser.add_argument("--format", choices=FORMATS, default="tfjob", help="job kind (default tfjob)")
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"image with TensorFlow and autodist installed (default {DEFAULT_IMAGE}, built by you)"
    )
    parser.add_argument("--namespace", default="default", help="namespace of every object (default: default)")
    parser.add_argument("--name", help="job name, a DNS-1035 label (default: the plan's name)")
    parser.add_argument("--gang", choices=GANGS, help="also emit a PodGroup for this gang scheduler")
    parser.add_argument("--script", help="training script inside the image, run by the task that drives training")
    parser.add_argument("--script-args", default="", metavar="ARGS", help="the script's arguments, one string")
    parser.add_argument(
        "--rdma-resource", default=DEFAULT_RDMA_RESOURCE, help=f"RDMA device-plugin resource (default {DEFAULT_RDMA_RESOURCE})"
    )
    parser.add_argument("--ib-hca", default=DEFAULT_IB_HCA, help=f"NCCL_IB_HCA (default {DEFAULT_IB_HCA})")
    parser.add_argument(
        "--socket-ifname", default=DEFAULT_SOCKET_IFNAME, help=f"NCCL_SOCKET_IFNAME (default {DEFAULT_SOCKET_IFNAME!r})"
    )


def script_args_of(args):
    """``--script-args`` split as a shell would."""
    import shlex

    try:
        return tuple(shlex.split(args.script_args))
    except ValueError as exc:
        raise InputError(f"cannot split {args.script_args!r} ({exc})", field="--script-args") from None


def options_from_args(args, default_script=None):
    """EmitOptions from parsed arguments; ``default_script`` when ``--script`` is not given."""
    from launcher.options import EmitOptions

    return EmitOptions(
        script=args.script or default_script,
        script_args=script_args_of(args),
        name=args.name,
        namespace=args.namespace,
        image=args.image,
        gang=args.gang,
        rdma_resource=args.rdma_resource,
        ib_hca=args.ib_hca,
        socket_ifname=args.socket_ifname,
    ).check()


def manifests_for(plan, args, default_script=None):
    """The validated objects of ``plan`` for the parsed manifest options."""
    from launcher.manifests import build_manifests

    return build_manifests(plan, args.format, options_from_args(args, default_script))


def register(subparsers):
    p = subparsers.add_parser("emit", help="write (and submit) Kubernetes manifests for a plan")
    p.add_argument("plan", help="plan.json written by `autodist plan`")
    p.add_argument("-o", "--output", metavar="DIR", help="write one YAML file per object here (default: YAML on stdout)")
    add_manifest_arguments(p)
    p.add_argument("--submit", action="store_true", help="create the objects in the cluster of the current kubeconfig")
    p.add_argument("--dry-run", action="store_true", help="with --submit: server-side dry run (dryRun=All)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.set_defaults(func=run)


def run(args):
    from autodist.plan import Plan
    from launcher.manifests import to_yaml, write_manifests

    if args.dry_run and not args.submit:
        raise InputError("--dry-run needs --submit", field="--dry-run")
    options_from_args(args)  # bad options fail before the plan is read
    objects = manifests_for(Plan.load(args.plan), args)
    if args.output:
        for path in write_manifests(objects, args.output):
            print(path)
    elif not args.submit:
        sys.stdout.write(to_yaml(objects))
    if args.submit:
        from launcher.submit import submit

        for name in submit(objects, kubeconfig=args.kubeconfig, dry_run=args.dry_run):
            print(f"{name} {'validated (dry run)' if args.dry_run else 'created'}")
    return 0
