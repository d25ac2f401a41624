"""A model's saved state is read as tensors only: a state file on a shared lake or store that
carries a pickled callable is refused in one line, and never run."""

from __future__ import annotations

import pytest
import torch

from intent_spark.core.errors import IntentError
from intent_spark.plugin import load_state

RAN: list[str] = []


def _marker(text: str) -> None:
    RAN.append(text)


class _Payload:
    """Unpickling it would call ``_marker``: what a hostile state file does with os.system."""

    def __reduce__(self):
        return (_marker, ("unpickled",))


def test_a_state_of_tensors_loads(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"weight": torch.arange(3.0)}, path)
    assert load_state(path, torch.device("cpu"))["weight"].tolist() == [0.0, 1.0, 2.0]


def test_a_state_carrying_a_pickled_callable_is_refused_in_one_line_and_never_run(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"weight": torch.zeros(2), "hook": _Payload()}, path)
    with pytest.raises(IntentError) as refused:
        load_state(path, torch.device("cpu"))
    line = str(refused.value)
    assert line.startswith(f"{path}: refused: the state file holds pickled objects, not only tensors")
    assert "\n" not in line
    assert RAN == []


def test_sasrec_refuses_such_a_state_file(tmp_path):
    import numpy as np

    from intent_spark.plugin import Catalogue
    from intent_spark.train.build import build_model
    from intent_spark.train.conf import ModelsConf
    from intent_spark.train.registry import resolve

    catalogue = Catalogue(np.r_[0, np.ones(5, dtype=np.int64)], np.zeros((6, 1), dtype=np.int64))
    conf = ModelsConf(context=3, models={"sasrec": {"blocks": 1, "dims": 8}})
    model = build_model(resolve("sasrec"), catalogue, conf, torch.device("cpu"))
    model.save(tmp_path)
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    torch.save({**state, "hook": _Payload()}, tmp_path / "state.pt")
    with pytest.raises(IntentError, match=r"state.pt: refused: the state file holds pickled objects"):
        model.load(tmp_path)
    assert RAN == []
