"""The loss module's repr shows the options in use; custom formulas get a readable class name."""

from __future__ import annotations

import metricc


def test_relaxation_specific_options() -> None:
    text = repr(metricc.compile("f1").loss("sigmoid", slope=5, offset=1, from_logits=True))
    assert "slope=5.0, offset=1.0" in text and "amplifier" not in text
    text = repr(metricc.compile("f1").loss())
    assert "relaxation='anyloss', amplifier=73.0" in text and "slope" not in text
    text = repr(metricc.compile("f1").loss("linear"))
    assert "amplifier" not in text and "slope" not in text and "temperature" not in text


def test_class_and_memory_options_are_shown() -> None:
    loss = metricc.compile("dice").loss(mode="multiclass", ignore_index=255, classes=[1, 2],
                                        class_weights=[1, 2, 3], eps=1e-6, memory_decay=0.9,
                                        multidim_average="global", average="weighted")
    text = repr(loss)
    for part in ("relaxation='softmax', temperature=1.0", "mode='multiclass'", "average='weighted'",
                 "ignore_index=255", "classes=(1, 2)", "class_weights=(1.0, 2.0, 3.0)",
                 "memory_decay=0.9", "eps=1e-06"):
        assert part in text, (part, text)
    samplewise = repr(metricc.compile("dice").loss(multidim_average="samplewise", reduction="sum"))
    assert "multidim_average='samplewise', reduction='sum'" in samplewise


def test_custom_formulas_get_a_class_name_and_their_formula() -> None:
    loss = metricc.compile("TP/(TP + 2*FP)").loss()
    assert type(loss).__name__ == "CustomMetricLoss"
    assert repr(loss).startswith("CustomMetricLoss(formula='TP/(TP + 2*FP)', relaxation='anyloss'")
    assert repr(metricc.compile("f1").loss()).startswith("F1Loss(relaxation=")
