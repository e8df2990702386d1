"""Every emission variant against a real kube-apiserver: what the server takes, stores and refuses.

Plans (real captured graphs, hand-built strategies simulated for real, as in
tests/test_plan_fixtures.py): allreduce over RDMA on dgx-h100:2, PS on
p3.16xlarge:2, CPU allreduce on cpu-2s-25g:2.  For each plan x format
(tfjob, mpijob, trainjob) x gang option (none, volcano, coscheduling), in a
namespace of its own: apply server-side (launcher.submit), compare what the
server stored with what was sent, create the PodGroup and Pods the operator
would (launcher.operators), and record each result.  Then: a second submit,
a submit refused part-way, and bad input.

The server is ../shared/tools/kube-apiserver.sh's (tests/kube_apiserver.py
starts it when built, or reuses one that answers).

    python benchmarks/k8s_apiserver.py

Writes benchmarks/results/k8s_apiserver.json and k8s_apiserver.md.
"""

import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from zoo import machine  # noqa: E402

from autodist.errors import AutoDistError, InputError  # noqa: E402
from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")
PLANS = [("allreduce over RDMA", "dgx-h100:2", "allreduce", "mlp"), ("PS", "p3.16xlarge:2", "ps", "embedding"),
         ("CPU allreduce", "cpu-2s-25g:2", "allreduce", "mlp")]
FORMATS = ["tfjob", "mpijob", "trainjob"]
GANGS = [None, "volcano", "coscheduling"]


def graphs():
    from autodist.graph.capture import capture_step
    from tests.conftest import build_embedding_step, build_mlp_step

    step, x, y, _ = build_mlp_step()
    mlp = capture_step(step, x, y, model_name="mlp")
    step, ids, y, _ = build_embedding_step("sgd")
    return {"mlp": mlp, "embedding": capture_step(step, ids, y, model_name="embedding")}


def run_variant(plan, fmt, gang, kubeconfig):
    from launcher.manifests import build_manifests
    from launcher.options import EmitOptions
    from launcher.server_check import check_on_server, fresh_namespace, remove_namespace, unexpected

    namespace = fresh_namespace("bench", kubeconfig)
    start = time.perf_counter()
    try:
        try:
            objects = build_manifests(plan, fmt, EmitOptions(namespace=namespace, gang=gang))
        except AutoDistError as exc:
            return {"result": "not emitted", "reason": str(exc)}
        checked = check_on_server(objects, fmt, gang, kubeconfig=kubeconfig)
    finally:
        remove_namespace(namespace, kubeconfig)
    surprises = {k: unexpected(v) for k, v in checked["differences"].items() if unexpected(v)}
    defaults = sorted({p for v in checked["differences"].values() for p in v} - {p for v in surprises.values() for p in v})
    ok = not surprises and not checked["refused"]
    return {"result": "accepted" if ok else "REFUSED or changed", "applied": checked["applied"],
            "stored_differs_beyond_defaults": surprises, "server_defaults_added": defaults,
            "operator_objects": checked["operator_objects"], "pods_accepted": len(checked["pods"]),
            "refused": checked["refused"], "seconds": round(time.perf_counter() - start, 2)}


def submit_checks(plan, kubeconfig):
    """A second submit, a submit refused part-way, and bad input, on the allreduce plan."""
    from launcher.manifests import build_manifests
    from launcher.options import EmitOptions
    from launcher.server_check import fresh_namespace, remove_namespace, stored_object
    from launcher.submit import _api_client, submit

    out = {}
    namespace = fresh_namespace("bench", kubeconfig)
    try:
        objects = build_manifests(plan, "mpijob", EmitOptions(namespace=namespace, gang="volcano"))
        out["first submit"] = submit(objects, kubeconfig=kubeconfig)
        out["second submit"] = submit(objects, kubeconfig=kubeconfig)
        broken = build_manifests(plan, "trainjob", EmitOptions(namespace=namespace, name="partway"))
        broken[0]["metadata"]["name"] = f"bench-partway-{namespace}"
        broken[-1]["spec"]["runtimeRef"]["name"] = broken[0]["metadata"]["name"]
        broken[-1]["spec"]["trainer"]["numNodes"] = "two"
        try:
            submit(broken, kubeconfig=kubeconfig)
            out["refused part-way"] = "not refused"
        except AutoDistError as exc:
            api = _api_client(kubeconfig)
            try:
                left = [o["kind"] for o in broken if stored_object(api, o) is not None]
            finally:
                api.close()
            out["refused part-way"] = {"error": str(exc), "objects left": left}
        for label, options, fmt, required in (
                ("missing namespace", EmitOptions(namespace="no-such-namespace"), "tfjob", ()),
                ("missing runtime", EmitOptions(namespace=namespace, runtime="no-such-runtime"), "trainjob",
                 [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                   "metadata": {"name": "no-such-runtime"}, "field": "--runtime"}])):
            try:
                submit(build_manifests(plan, fmt, options), kubeconfig=kubeconfig, required=required)
                out[label] = "accepted"
            except InputError as exc:
                out[label] = str(exc)
    finally:
        remove_namespace(namespace, kubeconfig)
    return out


def markdown(report):
    lines = ["# Emitted jobs against a real kube-apiserver", "",
             f"Command: `python benchmarks/k8s_apiserver.py`  ",
             f"Machine: {report['machine']}  ",
             f"Server: kube-apiserver {report['server']} (../shared/tools/kube-apiserver.sh: etcd 3.4, the shipped CRDs)  ",
             "Each variant in a namespace of its own: applied server-side, stored copy compared with what was sent, "
             "then the operator's PodGroup and Pods created (no operator, scheduler or kubelet runs).", "",
             "| plan | preset | format | gang | result | applied | stored beyond defaults | operator objects | pods accepted |",
             "|---|---|---|---|---|---|---|---|---|"]
    for v in report["variants"]:
        r = v["result"]
        if r["result"] == "not emitted":
            lines.append(f"| {v['plan']} | {v['preset']} | {v['format']} | {v['gang'] or '-'} | not emitted: "
                         f"{r['reason'].split(': ', 1)[-1]} | | | | |")
            continue
        applied = ", ".join(f"{k} {a}" for k, a in r["applied"].items())
        lines.append(f"| {v['plan']} | {v['preset']} | {v['format']} | {v['gang'] or '-'} | {r['result']} | {applied} | "
                     f"{r['stored_differs_beyond_defaults'] or 'nothing'} | {', '.join(r['operator_objects']) or '-'} | "
                     f"{r['pods_accepted']} |")
    defaults = sorted({p for v in report["variants"] for p in v["result"].get("server_defaults_added", [])})
    lines += ["", "Server defaults the stored copies add (allowed): " + ", ".join(f"`{p}`" for p in defaults), "",
              "## Submission", ""]
    for label, value in report["submit"].items():
        lines.append(f"- {label}: {value}")
    lines += ["", f"Totals: {report['accepted']} of {report['emitted']} emitted variants accepted; "
              f"{report['not_emitted']} not emitted (a format that cannot carry the plan).", "",
              "Left unchecked by a 1.20 server: CEL rules (`x-kubernetes-validations`) and the Trainer CRDs' "
              "`default: \"\"` on object names (tests/kube_apiserver.py installs them without those defaults)."]
    return "\n".join(lines) + "\n"


def main():
    from tests import kube_apiserver
    from tests.test_plan_fixtures import build_plan

    started_at = machine()
    with tempfile.TemporaryDirectory() as crds:
        kubeconfig, started = kube_apiserver.start(crds)
    try:
        made = graphs()
        variants = []
        for label, preset, kind, graph in PLANS:
            plan = build_plan(made[graph], preset, kind)
            for fmt in FORMATS:
                for gang in GANGS:
                    result = run_variant(plan, fmt, gang, kubeconfig)
                    variants.append({"plan": label, "preset": preset, "format": fmt, "gang": gang, "result": result})
                    print(f"{label:20s} {fmt:8s} {str(gang):12s} {result['result']}", flush=True)
        submit = submit_checks(build_plan(made["mlp"], "dgx-h100:2", "allreduce"), kubeconfig)
        server = kube_apiserver.version(kubeconfig).splitlines()[-1].split(": ")[-1]  # "Server Version: v1.20.2"
    finally:
        if started:
            kube_apiserver.stop()
    emitted = [v for v in variants if v["result"]["result"] != "not emitted"]
    report = {"machine": started_at, "server": server, "variants": variants, "submit": submit,
              "emitted": len(emitted), "accepted": sum(v["result"]["result"] == "accepted" for v in emitted),
              "not_emitted": len(variants) - len(emitted)}
    write_json_atomic(os.path.join(RESULTS, "k8s_apiserver.json"), report)
    write_text_atomic(os.path.join(RESULTS, "k8s_apiserver.md"), markdown(report))
    print(f"{report['accepted']} of {report['emitted']} emitted variants accepted by {server}; "
          f"{report['not_emitted']} not emitted")


if __name__ == "__main__":
    main()
