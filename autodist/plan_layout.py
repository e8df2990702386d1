"""A plan's task layout: its jobs, and the TensorFlow device string of each task's logical devices.

Below both :mod:`autodist.plan`, which lays tasks out, and :mod:`autodist.plan_checks`, which checks a read
plan's layout.
"""

JOBS = ("chief", "worker", "ps")


def task_device_strings(task, resource_spec):
    """Logical device -> TensorFlow device string, for the devices of one task.

    Devices of one kind are numbered from 0 in the order the task lists them.
    """
    out, seen = {}, {}
    for dev in task["devices"]:
        kind = resource_spec.device(dev).kind
        out[dev] = f"/job:{task['job']}/task:{task['index']}/device:{kind}:{seen.get(kind, 0)}"
        seen[kind] = seen.get(kind, 0) + 1
    return out


def device_assignments(tasks, resource_spec):
    """One entry per device of every task: its job, task index and TensorFlow device string."""
    return [
        {"device": dev, "job": t["job"], "task": t["index"], "tf_device": tf}
        for t in tasks
        for dev, tf in task_device_strings(t, resource_spec).items()
    ]
