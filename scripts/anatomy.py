#!/usr/bin/env python3
"""anatomy.py SANDBOX_PID LABEL -- COMMAND...: run COMMAND (a load generator against the sandbox)
and print where the two cores went meanwhile: the client's and the sandbox's CPU (user/system),
their threads' CPU, voluntary and involuntary context switches, and the machine's idle, softirq
and other time from /proc/stat. Used by scripts/bench-client-anatomy.sh; Linux only."""
import json, os, subprocess, sys, threading, time

TICK = os.sysconf("SC_CLK_TCK")


def proc_stat():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {name: int(value) for name, value in zip(names, parts)}


def task_stats(pid):
    """{tid: (name, utime, stime, voluntary, involuntary)} for every thread of pid."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            utime, stime = int(fields[11]), int(fields[12])
            vol = invol = 0
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol = int(line.split()[1])
            out[tid] = (name, utime, stime, vol, invol)
        except (OSError, ValueError, IndexError):
            pass
    return out


def diff(after, before):
    out = {}
    for tid, (name, u, s, v, i) in after.items():
        b = before.get(tid, (name, 0, 0, 0, 0))
        out[tid] = (name, u - b[1], s - b[2], v - b[3], i - b[4])
    return out


def summary(label, threads, seconds, requests, threads_only=False):
    u = sum(t[1] for t in threads.values()) / TICK
    s = sum(t[2] for t in threads.values()) / TICK
    v = sum(t[3] for t in threads.values())
    i = sum(t[4] for t in threads.values())
    if not threads_only:
        print(f"   {label:8s} cpu {u + s:6.2f} s = {100 * (u + s) / seconds:5.1f}% of a core (user {u:.2f}, sys {s:.2f}); "
              f"{1e6 * (u + s) / requests:5.2f} us/req; ctx switches vol {v} ({v / requests:.3f}/req) invol {i}")
    busy = sorted(threads.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    for tid, (name, tu, ts, tv, ti) in busy[:6]:
        cpu = (tu + ts) / TICK
        if cpu < 0.05 and tv < 100:
            continue
        print(f"      thread {name[:15]:15s} {cpu:6.2f} s ({100 * cpu / seconds:5.1f}%) user {tu / TICK:.2f} sys {ts / TICK:.2f} vol {tv} invol {ti}")


def main():
    sandbox = int(sys.argv[1])
    label = sys.argv[2]
    requests = int(sys.argv[3])
    command = sys.argv[sys.argv.index("--") + 1:]
    sys_before = proc_stat()
    sb_before = task_stats(sandbox)
    start = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last = {}
    first = {}
    done = threading.Event()

    def sample():
        nonlocal last
        while not done.is_set():
            now = task_stats(child.pid)
            if now:
                for tid, value in now.items():
                    first.setdefault(tid, (value[0], 0, 0, 0, 0))
                last = now
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        output = child.stdout.read()
    finally:
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = status
    seconds = time.monotonic() - start
    done.set()
    sampler.join()
    sys_after = proc_stat()
    sb_after = task_stats(sandbox)
    cores = os.cpu_count() or 1
    total = sum(sys_after[k] - sys_before[k] for k in sys_before) or 1
    shares = {k: 100 * cores * (sys_after[k] - sys_before[k]) / total for k in sys_before}
    print(f"== {label}: {seconds:.2f} s wall, {requests / seconds:,.0f} req/s (wall of the whole process, start-up included)")
    # The whole process's totals from wait4 (the last sample may miss the end or the start).
    total_cpu = usage.ru_utime + usage.ru_stime
    print(f"   client   cpu {total_cpu:6.2f} s = {100 * total_cpu / seconds:5.1f}% of a core (user {usage.ru_utime:.2f}, "
          f"sys {usage.ru_stime:.2f}); {1e6 * total_cpu / requests:5.2f} us/req; ctx switches vol {usage.ru_nvcsw} "
          f"({usage.ru_nvcsw / requests:.3f}/req) invol {usage.ru_nivcsw}; per thread (sampled):")
    summary("", last, seconds, requests, threads_only=True)
    summary("sandbox", diff(sb_after, sb_before), seconds, requests)
    print(f"   machine (% of one core, summed over {cores} cores): "
          + ", ".join(f"{k} {v:.0f}%" for k, v in shares.items() if v >= 0.5))
    for line in output.decode(errors="replace").strip().splitlines():
        if line.startswith("status codes:"):
            print("   | h2load: " + line)
        elif line.startswith("finished in"):
            print("   | h2load: " + line)
        elif line.startswith("{"):
            try:
                figures = json.loads(line)
                print(f"   | herald bench: {figures['notifications_per_second']:,.0f}/s over {figures['wall_seconds']:.2f} s, "
                      f"{figures['cpu_us_per_notification']} us/notification, p50 {figures['latency_ms']['p50']:.1f} ms, failed {figures['failed']}")
            except (ValueError, KeyError):
                print("   | " + line[:200])


if __name__ == "__main__":
    main()
