"""Tests of the progress writer and its framework callbacks (the frameworks
are stand-ins with the same hooks: the callbacks are exercised as Lightning
and MindSpore call them). Run: python3 -m unittest -v (in this directory)."""

import json
import os
import shutil
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clusterd_progress as cp  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 1_700_000_000.0

    def __call__(self):
        return self.now


class WriterTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.clock = FakeClock()

    def read(self, job="train", rank=3):
        with open(os.path.join(self.dir, job, "%d.json" % rank)) as f:
            return json.load(f)

    def test_writes_the_latest_step_at_most_once_per_interval(self):
        w = cp.ProgressWriter("train", 3, directory=self.dir, interval=1.0, clock=self.clock)
        w.step(1, step_time=0.5, collective_time=0.2, samples=8)
        self.assertEqual(self.read(), {"step": 1, "time": self.clock.now, "checkpointing": False,
                                       "step_time": 0.5, "collective_time": 0.2, "samples": 8})
        self.clock.now += 0.5
        w.step(2, step_time=0.5, samples=8)
        self.assertEqual(self.read()["step"], 1, "within the interval: not written")
        self.clock.now += 0.6
        w.step(3, step_time=0.5, samples=8)
        got = self.read()
        self.assertEqual(got["step"], 3)
        self.assertEqual(got["samples"], 16, "samples since the last write")
        # Only the file itself is left: the temporary files were renamed.
        self.assertEqual(os.listdir(os.path.join(self.dir, "train")), ["3.json"])

    def test_collective_time_never_above_the_step_time(self):
        w = cp.ProgressWriter("train", 3, directory=self.dir, clock=self.clock)
        w.step(1, step_time=0.5, collective_time=0.9)
        self.assertEqual(self.read()["collective_time"], 0.5)

    def test_checkpoint_is_said_at_once_and_ends_with_the_next_step(self):
        w = cp.ProgressWriter("train", 3, directory=self.dir, clock=self.clock)
        w.step(10)
        w.checkpoint(True)
        self.assertTrue(self.read()["checkpointing"])
        self.assertEqual(self.read()["step"], 10)
        self.clock.now += 5
        w.step(11)
        self.assertFalse(self.read()["checkpointing"])

    def test_rank_from_the_launchers_environment(self):
        env = {"CLUSTERD_JOB_ID": "job-a", "PET_NODE_RANK": "2", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "5",
               "CLUSTERD_PROGRESS_DIR": self.dir}
        old = dict(os.environ)
        try:
            for k in ("RANK", "RANK_ID"):
                os.environ.pop(k, None)
            os.environ.update(env)
            w = cp.ProgressWriter.from_env()
            self.assertEqual((w.job_id, w.rank), ("job-a", 21))
            self.assertEqual(w.path, os.path.join(self.dir, "job-a", "21.json"))
            os.environ["RANK"] = "7"
            self.assertEqual(cp.ProgressWriter.from_env().rank, 7)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_bad_ids_are_refused_and_write_errors_never_raise(self):
        with self.assertRaises(ValueError):
            cp.ProgressWriter("../etc", 0, directory=self.dir)
        with self.assertRaises(ValueError):
            cp.ProgressWriter("", 0, directory=self.dir)
        blocker = os.path.join(self.dir, "file")
        open(blocker, "w").close()
        w = cp.ProgressWriter("train", 0, directory=blocker, clock=self.clock)
        w.step(1)  # the directory cannot be made: reported once, training goes on
        w.step(2, force=True)


class CallbackTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.saved = dict(sys.modules)

    def tearDown(self):
        sys.modules.clear()
        sys.modules.update(self.saved)

    def read(self, rank):
        with open(os.path.join(self.dir, "train", "%d.json" % rank)) as f:
            return json.load(f)

    def test_lightning_callback_reports_each_batch_and_checkpoints(self):
        base = type("Callback", (), {})
        lightning = types.ModuleType("lightning")
        pytorch = types.ModuleType("lightning.pytorch")
        pytorch.Callback = base
        lightning.pytorch = pytorch
        sys.modules.update({"lightning": lightning, "lightning.pytorch": pytorch})
        w = cp.ProgressWriter("train", 1, directory=self.dir, interval=0)
        cb = cp.lightning_callback(w)
        self.assertIsInstance(cb, base)
        trainer = types.SimpleNamespace(global_step=41)
        cb.on_train_batch_start(trainer, None, None, 0)
        cb.on_train_batch_end(trainer, None, None, None, 0)
        got = self.read(1)
        self.assertEqual(got["step"], 41)
        self.assertGreaterEqual(got["step_time"], 0)
        cb.on_save_checkpoint(trainer, None, {})
        self.assertTrue(self.read(1)["checkpointing"])

    def test_mindspore_callback_reports_each_step(self):
        base = type("Callback", (), {"__init__": lambda self: None})
        mindspore = types.ModuleType("mindspore")
        train = types.ModuleType("mindspore.train")
        callback = types.ModuleType("mindspore.train.callback")
        callback.Callback = base
        sys.modules.update({"mindspore": mindspore, "mindspore.train": train,
                            "mindspore.train.callback": callback})
        w = cp.ProgressWriter("train", 2, directory=self.dir, interval=0)
        cb = cp.mindspore_callback(w)
        self.assertIsInstance(cb, base)
        params = types.SimpleNamespace(cur_step_num=1200)
        ctx = types.SimpleNamespace(original_args=lambda: params)
        cb.step_begin(ctx)
        cb.step_end(ctx)
        self.assertEqual(self.read(2)["step"], 1200)


if __name__ == "__main__":
    unittest.main()
