"""TensorBoard events without TensorFlow: what the run writes is what TensorBoard reads."""

import subprocess
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from archer_jax.records import report


def test_scalars_and_hparams_read_back(tmp_path):
    writers = report.Writers(tmp_path)
    writers.hparams({"agent": "archer", "lr": 1e-5, "nested": {"dropped": 1}})
    writers.scalars(1, {"critic/loss": 0.5, "eval/return": -3.25, "note": "not a number"})
    writers.scalars(2, {"critic/loss": 0.25})
    writers.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["critic/loss", "eval/return"]
    assert [(e.step, e.value) for e in events.Scalars("critic/loss")] == [(1, 0.5), (2, 0.25)]
    assert [(e.step, e.value) for e in events.Scalars("eval/return")] == [(1, -3.25)]
    assert "_hparams_/session_start_info" in events.Tags()["tensors"]


def test_the_train_app_needs_no_tensorflow(tmp_path):
    code = f"""
import sys
sys.modules["tensorflow"] = None  # as on an image without TensorFlow: importing it fails
import archer_jax.train
from archer_jax.records import report
writers = report.Writers({str(tmp_path)!r})
writers.scalars(3, {{"x": 1.0}})
writers.close()
print("ok", sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
print("tfds", "tensorflow_datasets" in sys.modules)  # an online run does not load TFDS either
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-3:-1] == ["ok ['tensorflow']", "tfds False"]  # only the blocked entry: nothing imported it
    assert list(tmp_path.glob("events.out.tfevents.*"))


def test_texts_read_back_without_tensorflow(tmp_path):
    code = f"""
import sys
sys.modules["tensorflow"] = None
from archer_jax.records import report
writers = report.Writers({str(tmp_path)!r})
writers.texts(4, {{"dialogues/greedy": "```\\nQuestions:\\nIs it a dog? Yes.\\n```"}})
writers.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    (event,) = events.Tensors("dialogues/greedy")
    assert event.step == 4
    assert event.tensor_proto.string_val == [b"```\nQuestions:\nIs it a dog? Yes.\n```"]
