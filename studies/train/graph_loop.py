"""The study's CUDA-graph training loop (docs/TRAINING_STUDY.md, "Graph loop").

The arithmetic and the recipe of run_study.train_one (the plain loop), with
the host taken out of the step: after WARM_STEPS eager steps, one training
step of a run is captured in a CUDA graph and replayed:

  batch (from the run's own generator) -> forward (bf16 autocast) -> loss ->
  backward -> clip_grad_norm_ -> lr from a device table -> fused AdamW
  (capturable, lr a device tensor) -> MHLA's project_mixing_ -> the loss
  written into the run's device loss record -> step counter + 1

Several runs share one process, each on its own CUDA stream with its own
graph, replayed round-robin (train_streams): one process then keeps the GPU
busy, where processes only time-slice it. run_many spreads the runs over
`jobs` such processes. Evaluation runs after training, eagerly, on the run's
stream (run_study.summarize, the plain loop's code).

The scored positions are gathered by index (scored_positions), the rows
x[scored] of the plain loop in the same order, without a data-dependent
shape. Batches, two modes (`data`):
  captured  drawn inside the graph from the run's generator, registered with
            the graph (torch.cuda.CUDAGraph.register_generator_state): each
            replay draws what the plain loop's eager calls draw at that step;
  eager     drawn outside the graph on the run's stream and copied into the
            graph's static input buffers (torch without that registration).

capture=False (or a CPU device) runs the same step body eagerly, the CPU
with a plain AdamW whose lr is set from the table on the host: the unit tests
(tests/python/test_study_graph.py) check it against the plain loop there.
"""
import collections
import contextlib
import math
import multiprocessing as mp
import queue
import time

import torch
import torch.nn.functional as F

import run_study
import tasks

WARM_STEPS = 3     # eager steps before the capture (lazy initialisation, Adam's state)
CHECK_EVERY = 50   # steps between reading back a loss (finite?) and the time limit
AHEAD = 2          # check points the host may run ahead of a run's stream
DATA_MODES = ("captured", "eager")


def can_capture_data():
    return hasattr(torch.cuda.CUDAGraph, "register_generator_state")


def default_data():
    """"captured" where torch can register a generator with a graph, else "eager"."""
    return "captured" if can_capture_data() else "eager"


def scored_positions(y, per_row):
    """The positions of the scored targets of each row, increasing: int64
    [B, per_row], so that gathering them gives the rows of x[y != IGNORE]
    in the same (row-major) order. Every row must hold per_row targets."""
    unscored = (y == tasks.IGNORE).to(torch.int8)
    return torch.sort(unscored, dim=1, stable=True).indices[:, :per_row]


def scored_per_row(job):
    """Targets per row: MQAR's key-value pairs, or the 2-D task's query cells."""
    return job["setting"][1] if job["task"] == "mqar" else job["cfg"]["queries"]


class GraphRun:
    """One training run of the graph loop: construct it (the model, optimizer,
    lr table, on its own stream), call step() until it returns False, then
    finish() for the result dict of run_study.summarize."""

    def __init__(self, job, data=None, capture=True, record_data=False):
        data = default_data() if data is None else data
        if data not in DATA_MODES:
            raise ValueError("graph loop: data %r is not one of %s" % (data, ", ".join(DATA_MODES)))
        self.job, self.cfg, self.amp = job, job["cfg"], job["amp"]
        self.device = torch.device(job["device"])
        self.cuda = self.device.type == "cuda"
        self.capture_on = bool(capture) and self.cuda
        if self.capture_on and data == "captured" and not can_capture_data():
            raise ValueError("graph loop: data 'captured' needs torch.cuda.CUDAGraph."
                             "register_generator_state (torch %s lacks it): use data 'eager'"
                             % torch.__version__)
        self.data, self.steps = data, self.cfg["steps"]
        if self.steps < 1:
            raise ValueError("graph loop: steps must be >= 1, got %d" % self.steps)
        self.per_row = scored_per_row(job)
        self.stop_at = job.get("stop_at", math.inf)
        self.t_start = time.time()
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.graph, self.sx, self.sy = None, None, None
        self.done, self.cut = 0, False
        self.checks = collections.deque()
        with self.on_stream():
            torch.manual_seed(job["seed"])
            self.model, self.gen = run_study.build(job["task"], self.cfg, job["variant"],
                                                   job["dim"], job["setting"], job["blocks"],
                                                   self.device)
            self.g = run_study.generator(self.device, job["seed"])
            self.eg = run_study.generator(self.device, 10_000 + job["seed"])
            self.params = list(self.model.parameters())
            self.mhla = self.model.mhla_layers()
            # the LambdaLR of make_optimizer, as a table: step s trains at lr_host[s]
            self.lr_host = [job["lr"] * run_study.lr_factor(s, self.steps)
                            for s in range(self.steps)]
            dev = self.device
            self.lr_table = torch.tensor(self.lr_host, dtype=torch.float32, device=dev)
            self.ctr = torch.zeros(1, dtype=torch.int64, device=dev)
            self.loss_hist = torch.full((self.steps,), float("nan"), device=dev)
            # per step, the sum of the batch's tokens (graph_check: captured data = eager data)
            self.data_hist = (torch.zeros(self.steps, dtype=torch.int64, device=dev)
                              if record_data else None)
            groups = self.model.param_groups(run_study.WEIGHT_DECAY)
            if self.cuda:
                self.lr_t = torch.tensor(self.lr_host[0], dtype=torch.float32, device=dev)
                self.opt = torch.optim.AdamW(groups, lr=self.lr_t, betas=(0.9, 0.98),
                                             fused=True, capturable=True)
                for grp in self.opt.param_groups:   # the one tensor the graph writes
                    grp["lr"] = self.lr_t
            else:
                self.lr_t = None
                self.opt = torch.optim.AdamW(groups, lr=self.lr_host[0], betas=(0.9, 0.98))

    def on_stream(self):
        return torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext()

    def _feed(self):
        """data "eager": this step's batch into the static input buffers."""
        x, y = self.gen(self.g, self.cfg["batch"])
        if self.sx is None:
            self.sx, self.sy = x, y
        else:
            self.sx.copy_(x)
            self.sy.copy_(y)

    def _body(self):
        """One training step, as run_study.train_step, on device tensors only."""
        if self.data == "captured":
            x, y = self.gen(self.g, self.cfg["batch"])
        else:
            x, y = self.sx, self.sy
        if self.data_hist is not None:
            self.data_hist.index_copy_(0, self.ctr, x.sum().view(1))
        idx = scored_positions(y, self.per_row)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp == "bf16"):
            logits = self.model(x, idx)
        loss = F.cross_entropy(logits.float(), y.gather(1, idx).reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        if self.lr_t is not None:
            self.lr_t.copy_(self.lr_table.index_select(0, self.ctr).reshape(()))
        self.opt.step()
        for layer in self.mhla:
            layer.project_mixing_()
        self.loss_hist.index_copy_(0, self.ctr, loss.detach().float().view(1))
        self.ctr.add_(1)

    def _capture(self):
        # only this run's stream waits (its warm-up steps); the other runs go on
        self.stream.synchronize()
        # the gradients become the graph's own buffers, rewritten by every replay
        self.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        if self.data == "captured":
            graph.register_generator_state(self.g)
        graph.capture_begin()
        try:
            self._body()
        finally:
            graph.capture_end()
        self.graph = graph

    def step(self):
        """Enqueue the next training step; False once the run is over (all its
        steps, its time limit, or a non-finite loss read back)."""
        if self.done >= self.steps:
            return False
        with self.on_stream():
            if self.data == "eager":
                self._feed()
            if self.graph is not None:
                self.graph.replay()
            else:
                if self.lr_t is None:
                    for grp in self.opt.param_groups:
                        grp["lr"] = self.lr_host[self.done]
                self.opt.zero_grad(set_to_none=True)
                self._body()
                if self.capture_on and self.done + 1 == WARM_STEPS:
                    self._capture()
        self.done += 1
        if self.done % CHECK_EVERY == 0 and not self._check():
            return False
        return self.done < self.steps

    def _check(self):
        """Bound how far the host runs ahead of the stream; stop on a
        non-finite loss read back, or past the run's time limit (cut)."""
        if self.cuda:
            host = torch.empty(1, pin_memory=True)
            with self.on_stream():
                host.copy_(self.loss_hist[self.done - 1: self.done], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self.stream)
            self.checks.append((ev, host))
            while len(self.checks) > AHEAD:
                ev, host = self.checks.popleft()
                ev.synchronize()
                if not math.isfinite(float(host[0])):
                    return False
        elif not math.isfinite(float(self.loss_hist[self.done - 1])):
            return False
        if self.done < self.steps and self.done % 100 == 0 and time.time() > self.stop_at:
            self.cut = True
            return False
        return True

    def losses(self):
        """The losses of the steps enqueued so far (a device tensor)."""
        return self.loss_hist[: self.done]

    def finish(self):
        """The run's result (run_study.summarize: curve, held-out accuracy);
        releases the graph and the model."""
        with self.on_stream():
            r = run_study.summarize(self.job, self.model, self.gen, self.eg, self.losses(),
                                    self.cut, self.t_start)
        r["loop"] = "graph" if self.graph is not None else "eager"
        r["graph_data"] = self.data
        self.release()
        return r

    def release(self):
        self.graph = self.model = self.opt = self.sx = self.sy = None
        self.params, self.mhla = [], []


def interleave_variants(runs):
    """The runs in turn by variant (each variant's runs in their given order):
    the streams of one process then train a mix. The variants' steps differ
    in GPU time (the causal MHLA step bounds the total at 64x4), and the
    cheaper steps overlap the costlier ones only when they run together."""
    by = collections.OrderedDict()
    for r in runs:
        by.setdefault(r["variant"], collections.deque()).append(r)
    out = []
    while by:
        for v in list(by):
            out.append(by[v].popleft())
            if not by[v]:
                del by[v]
    return out


def failure(job, e):
    return {"error": "%s: %s" % (type(e).__name__, e),
            **{k: job[k] for k in ("task", "variant", "dim", "lr", "seed")}}


def train_streams(next_job, streams, data, on_result):
    """Train the runs that next_job() hands out (None: no more), up to
    `streams` at once, each on its own stream, one step each in turn.
    on_result gets each result, None for a run not started (past its
    "deadline"), or an error dict. A run trains at most job["run_limit"]
    seconds from its start, and not past the time job["end_at"] (then cut)."""
    if streams < 1:
        raise ValueError("graph loop: streams must be >= 1, got %d" % streams)
    active, more = [], True
    while True:
        while more and len(active) < streams:
            job = next_job()
            if job is None:
                more = False
            elif time.time() > job.get("deadline", math.inf):
                on_result(None)
            else:
                job = dict(job, stop_at=min(time.time() + job.get("run_limit", math.inf),
                                            job.get("end_at", math.inf)))
                try:
                    active.append(GraphRun(job, data))
                except Exception as e:  # noqa: BLE001  (reported, the others go on)
                    on_result(failure(job, e))
        if not active:
            return
        for run in list(active):
            try:
                if run.step():
                    continue
                on_result(run.finish())
            except Exception as e:  # noqa: BLE001
                on_result(failure(run.job, e))
                run.release()
            active.remove(run)


def _worker(index, jobq, resq, streams, data):
    run_study.worker_init(1)
    train_streams(jobq.get, streams, data, resq.put)
    resq.put(("done", index))


def run_many(runs, jobs, streams, data, collect):
    """train_streams over `runs` (in order) in this process (jobs == 1), or in
    `jobs` spawned worker processes that take the next run as a stream frees."""
    if jobs < 1 or streams < 1:
        raise ValueError("graph loop: jobs and streams must be >= 1, got %d, %d" % (jobs, streams))
    if jobs == 1:
        it = iter(runs)
        train_streams(lambda: next(it, None), streams, data, collect)
        return
    ctx = mp.get_context("spawn")
    jobq, resq = ctx.Queue(), ctx.Queue()
    for r in runs:
        jobq.put(r)
    for _ in range(jobs):
        jobq.put(None)
    procs = [ctx.Process(target=_worker, args=(i, jobq, resq, streams, data))
             for i in range(jobs)]
    for p in procs:
        p.start()
    done = set()
    while len(done) < jobs:
        try:
            r = resq.get(timeout=5)
        except queue.Empty:
            for i, p in enumerate(procs):
                if i not in done and not p.is_alive() and p.exitcode != 0:
                    done.add(i)
                    collect({"error": "graph worker %d exited with code %s" % (i, p.exitcode),
                             "task": "?", "variant": "?", "dim": 0, "lr": 0.0, "seed": -1})
            continue
        if isinstance(r, tuple) and r and r[0] == "done":
            done.add(r[1])
        else:
            collect(r)
    for p in procs:
        p.join()


def time_graph(jobs, steps, data=None):
    """Aggregate training steps per second of the runs `jobs` (one each) in
    this process, each on its own stream and graph, replayed round-robin:
    `steps` steps each, timed after their warm-up, capture and a first
    replay; and the peak MiB of torch's allocator over them (0 on the CPU)."""
    cuda = jobs[0]["device"].startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    base = 0
    if cuda:  # memory still held from before (earlier runs of the process) is not counted
        sync()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    runs = []
    for job in jobs:
        cfg = dict(job["cfg"], steps=max(job["cfg"]["steps"], WARM_STEPS + 1 + steps))
        runs.append(GraphRun(dict(job, cfg=cfg), data))
    for run in runs:
        for _ in range(WARM_STEPS + 1):
            run.step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        for run in runs:
            run.step()
    sync()
    rate = len(runs) * steps / (time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else 0.0
    for run in runs:
        run.release()
    return rate, peak
