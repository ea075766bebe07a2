"""Job progress for ClusterD, written by the training process itself.

Each rank keeps one small JSON file, <dir>/<job id>/<rank>.json, with its
latest step; NodeD on the node reads the files that changed and sends them to
ClusterD, which finds hangs and slow ranks and counts the job's effective
training time (docs/recovery.md, "Progress"; docs/noded.md, "Job progress").
The training code needs no gRPC and no ClusterD address: only the directory,
mounted from the host (/run/clusterd/progress by default).

Use it from any loop:

    progress = ProgressWriter.from_env()          # CLUSTERD_JOB_ID, RANK
    for step, batch in enumerate(loader, 1):
        t0 = time.monotonic()
        loss = train_step(batch)                  # compute + all-reduce
        progress.step(step, step_time=time.monotonic() - t0,
                      collective_time=allreduce_seconds, samples=len(batch))

or through the framework callbacks below (PyTorch Lightning, MindSpore).
Nothing here imports a framework unless its callback is used.
"""

import json
import os
import tempfile
import time

DEFAULT_DIR = "/run/clusterd/progress"


class ProgressWriter:
    """Writes one rank's progress file, at most once per `interval` seconds.

    The file is replaced atomically (written aside, then renamed), so NodeD
    never reads half a file. Errors writing it are swallowed after the first
    is reported: progress reporting must never stop training.
    """

    def __init__(self, job_id, rank, directory=None, interval=1.0, clock=time.time):
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError("job_id: a job id (no '/', not starting with '.')")
        if int(rank) < 0:
            raise ValueError("rank: at least 0")
        self.job_id = job_id
        self.rank = int(rank)
        self.directory = os.path.join(directory or os.environ.get("CLUSTERD_PROGRESS_DIR", DEFAULT_DIR), job_id)
        self.path = os.path.join(self.directory, "%d.json" % self.rank)
        self.interval = float(interval)
        self.clock = clock
        self._last_write = None
        self._samples = 0
        self._tokens = 0
        self._state = {}
        self._failed = False

    @classmethod
    def from_env(cls, **kwargs):
        """The job id from CLUSTERD_JOB_ID; the rank from RANK (torchrun),
        RANK_ID (MindSpore) or PET_NODE_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK."""
        job = os.environ.get("CLUSTERD_JOB_ID", "")
        rank = os.environ.get("RANK") or os.environ.get("RANK_ID")
        if rank is None and "PET_NODE_RANK" in os.environ:
            rank = int(os.environ["PET_NODE_RANK"]) * int(os.environ.get("LOCAL_WORLD_SIZE", "1")) + int(
                os.environ.get("LOCAL_RANK", "0"))
        return cls(job, int(rank or 0), **kwargs)

    def step(self, step, step_time=None, collective_time=None, samples=0, tokens=0, force=False):
        """Records that `step` completed. step_time: seconds the recent steps
        took; collective_time: of that, seconds spent waiting in collectives."""
        self._samples += int(samples)
        self._tokens += int(tokens)
        state = {"step": int(step), "time": self.clock(), "checkpointing": False}
        if step_time is not None:
            state["step_time"] = float(step_time)
            if collective_time is not None:
                state["collective_time"] = min(float(collective_time), float(step_time))
        self._state = state
        self._maybe_write(force)

    def checkpoint(self, saving):
        """Says the rank saves a checkpoint (saving=True) or is done (False):
        ClusterD declares no hang meanwhile."""
        self._state = dict(self._state or {"step": 0}, checkpointing=bool(saving), time=self.clock())
        self._maybe_write(force=True)

    def _maybe_write(self, force):
        now = self.clock()
        if not force and self._last_write is not None and now - self._last_write < self.interval:
            return
        record = dict(self._state)
        if self._samples:
            record["samples"] = self._samples
        if self._tokens:
            record["tokens"] = self._tokens
        self._samples = self._tokens = 0
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".%d." % self.rank, suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
            self._last_write = now
        except OSError as e:
            if not self._failed:
                self._failed = True
                print("clusterd_progress: cannot write %s: %s" % (self.path, e))


def lightning_callback(writer):
    """A PyTorch Lightning callback reporting each training batch."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback

    class ClusterdProgress(Callback):
        def __init__(self):
            self._start = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self._start = time.monotonic()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            took = time.monotonic() - self._start if self._start is not None else None
            writer.step(trainer.global_step, step_time=took)

        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            # Until the next batch ends (step() says it is over).
            writer.checkpoint(True)

    return ClusterdProgress()


def mindspore_callback(writer):
    """A MindSpore callback reporting each step (model.train(..., callbacks=[...]))."""
    from mindspore.train.callback import Callback

    class ClusterdProgress(Callback):
        def __init__(self):
            super().__init__()
            self._start = None

        def step_begin(self, run_context):
            self._start = time.monotonic()

        def step_end(self, run_context):
            params = run_context.original_args()
            took = time.monotonic() - self._start if self._start is not None else None
            writer.step(params.cur_step_num, step_time=took)

    return ClusterdProgress()
