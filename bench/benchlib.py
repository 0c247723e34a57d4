"""Helpers shared by the benchmark scripts (imported from bench/)."""
import time


def interleaved_times(fns, rounds, min_time, max_rounds=200):
    """fns: dict name -> callable. One warm-up call each, then rounds that
    call every fn once in turn (so machine noise hits all alike), until at
    least `rounds` rounds and `min_time` seconds have passed (at most
    max_rounds). Returns name -> list of seconds."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    start = time.perf_counter()
    r = 0
    while r < rounds or time.perf_counter() - start < min_time:
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
        r += 1
        if r >= max_rounds:
            break
    return times


def cpu_model():
    """The processor's model name from /proc/cpuinfo ("unknown CPU" if absent)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cuda_median_ms(fn, reps=5, warm=2):
    """Median milliseconds of `reps` calls of fn, each between two CUDA
    events on the current stream, after `warm` untimed calls (torch is
    imported here: the CPU scripts never need it)."""
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
