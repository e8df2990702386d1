"""model.fit's class_weight, sample_weight and steps_per_epoch run in Keras' own fit loop, so a fit that passes one
is planned with every variable allreduced (autodist's one-client loop, which runs PS plans, does not take them);
before, the search could pick a PS plan and the run refused the argument after the script's preamble."""

import os

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "fit_weighted.py")


def test_a_fit_with_keras_only_arguments_is_planned_for_keras_fit():
    from autodist.api import make_plan
    from autodist.graph.capture import capture_script

    item = capture_script(SCRIPT)
    assert item.job.fit_arguments == ["class_weight", "steps_per_epoch"]
    assert "model.fit(class_weight=...) runs in Keras' own fit loop" in item.job.why_collective_only()
    plan = make_plan(item, "cpu-local:4", moves=300)
    assert plan.strategy.allreduces_everything()
