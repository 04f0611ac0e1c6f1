#!/usr/bin/env python3
"""heddle vs DVC vs Snakemake vs a shell loop (issue 6). Run through benches/peers/run.sh.

Sections:
  shapes      chain / fan / matrix pipelines, N stages, every tool: plan (dry run on a fresh
              project), first full run, no-op rerun, incremental rerun after changing src.txt;
              the floor is `bash floor.sh` running the same commands in a loop.
  large       a stage writing 1 GiB: first run, no-op, restore after deleting the output,
              `heddle cache verify`; DVC: repro, no-op, restore by `dvc repro` and by `dvc checkout`.
  hash        sha256 of a 1 GiB file: heddle's hasher (hash_bench example), sha256sum, openssl.
  containers  heddle's engine wrapper (overhead example) vs `docker run --rm`, median of 20;
              benches/container.sh too when it exists.

Each measurement is a fresh process timed from spawn to exit, killed (whole process group) at the
time limit and then recorded as "> limit". Short phases are repeated and the median is taken; a
phase whose first sample took longer than --long seconds is run once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ["heddle", "dvc", "snakemake", "floor", "floorsh"]
SHAPES = ["chain", "fan", "matrix"]
PHASES = ["plan", "full", "noop1", "noop", "incr"]
PHASE_NAMES = {
    "plan": "plan / dry run (fresh)",
    "full": "first full run",
    "noop1": "first no-op rerun (once)",
    "noop": "no-op rerun (median)",
    "incr": "incremental (source changed)",
}


# --------------------------------------------------------------------------------------------
# measuring


@dataclass
class M:
    """One measurement: status ok | limit | error | skipped | n/a, the median and the samples."""

    status: str
    value: float | None = None
    samples: list = field(default_factory=list)
    note: str = ""
    log: str = ""
    cpu: list = field(default_factory=list)  # user+sys seconds of the process tree per sample

    def ok(self):
        return self.status == "ok"

    def to_json(self):
        return dict(status=self.status, value=self.value, samples=self.samples, note=self.note, log=self.log, cpu=self.cpu)


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = Path(args.work).resolve()
        self.repo = Path(args.repo).resolve()
        self.bin = self.work / "bin"
        self.venv = self.work / "venv" / "bin"
        self.runs = self.work / "runs"
        self.trash = self.work / "trash"
        self.logs = self.work / ("logs-smoke" if args.smoke else "logs")  # a smoke run keeps the full run's logs
        self.results = {}  # key -> M
        self.anomalies = []
        self.seq = 0
        self.env = dict(os.environ)
        self.env["PATH"] = f"{self.venv}:{self.env['PATH']}"
        self.env["DVC_NO_ANALYTICS"] = "1"
        self.env["LC_ALL"] = "C"
        self.env.pop("HEDDLE_CACHE_DIR", None)

    # -- files -----------------------------------------------------------------------------

    def discard(self, path):
        """Move a tree aside instead of deleting it now. On ext4 without a journal (this machine's
        root), every inode deleted in the last ~30 s makes each new inode's allocation scan past it
        (fs/ext4/ialloc.c recently_deleted): deleting a 10,000-file tree right before a timed run
        made creating a file ~30x slower for that run. The trash is emptied between sections."""
        self.trash.mkdir(parents=True, exist_ok=True)
        self.seq += 1
        os.rename(path, self.trash / f"{self.seq}-{path.name}")

    def empty_trash(self, settle=True):
        """Delete the moved-aside trees, then wait out ext4's recently-deleted window."""
        if self.trash.exists() and any(self.trash.iterdir()):
            n = sum(1 for _ in self.trash.rglob("*"))
            shutil.rmtree(self.trash)
            if settle and n > 2000:
                print(f"  (deleted {n} files; waiting {self.a.settle:g} s for ext4 to settle)", flush=True)
                time.sleep(self.a.settle)

    # -- processes -------------------------------------------------------------------------

    def timed(self, cmd, cwd, limit, env=None, tag="cmd"):
        """Run cmd (list) once; return (status, seconds, log path)."""
        self.seq += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{self.seq:05d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', tag)}.log"
        with open(log, "wb") as lf:
            lf.write(f"$ (cd {cwd} && {' '.join(map(str, cmd))})\n".encode())
            lf.flush()
            t0 = time.perf_counter()
            mem = self.a.mem_limit

            def limit_memory():
                # A runaway measurement (heddle's matrix incremental at N=10,000 reached 24 GB RSS
                # and the kernel's OOM killer) must not take the shared machine with it.
                if mem:
                    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

            p = subprocess.Popen(
                [str(c) for c in cmd],
                cwd=cwd,
                env=env or self.env,
                stdin=subprocess.DEVNULL,
                stdout=lf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=limit_memory,
            )
            # A blocking wait4 (Popen.wait(timeout=...) polls with growing sleeps, which rounds a
            # 20 ms run up to 31.5 ms); a timer kills the whole process group at the limit.
            killed = threading.Event()

            def kill():
                killed.set()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(limit, kill) if limit else None
            if timer:
                timer.start()
            _, status, ru = os.wait4(p.pid, 0)
            secs = time.perf_counter() - t0
            if timer:
                timer.cancel()
            rc = p.returncode = os.waitstatus_to_exitcode(status)
            self.last_rc = rc
            self.last_cpu = ru.ru_utime + ru.ru_stime
            if killed.is_set():
                lf.write(f"\n[bench] killed at the {limit} s limit\n".encode())
                return "limit", float(limit), str(log)
            lf.write(f"\n[bench] exit {rc} after {secs:.4f} s, cpu {self.last_cpu:.4f} s\n".encode())
        if rc != 0:
            return "error", secs, str(log)
        return "ok", secs, str(log)

    def measure(self, key, cmd, cwd, setup=None, reps=None, limit=None, env=None, check=None):
        """Median over reps (once when the first sample is long). setup(i) runs untimed before each
        sample; check() after each, returning an error string or None."""
        reps = reps or self.a.reps
        limit = limit or self.a.limit
        samples = []
        cpus = []
        log = ""
        for i in range(reps):
            if setup:
                setup(i)
            st, secs, log = self.timed(cmd, cwd, limit, env=env, tag=key)
            if st != "ok":
                m = M(st, secs if st == "limit" else None, samples, log=log)
                if st == "error":
                    rc = self.last_rc
                    why = f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"
                    m.note = f"{why}, see {log}: " + tail(log)
                return self.record(key, m)
            if check:
                err = check()
                if err:
                    return self.record(key, M("error", None, samples, note=err, log=log))
            samples.append(secs)
            cpus.append(round(self.last_cpu, 4))
            if secs > self.a.long:
                break
        return self.record(key, M("ok", statistics.median(samples), samples, log=log, cpu=cpus))

    def record(self, key, m):
        self.results[key] = m
        if getattr(self, "state_file", None):
            # Saved after every measurement, so an interrupted run can still be reported
            # (--report-only work/results.partial.json).
            self.state_file.with_suffix(".partial.json").write_text(json.dumps(dict(
                meta=getattr(self, "meta", {}), results={k: v.to_json() for k, v in self.results.items()},
                anomalies=self.anomalies)))
        shown = fmt(m)
        print(f"  {key:<40} {shown:>12}   {' '.join(f'{s:.3f}' for s in m.samples)} {m.note[:200]}", flush=True)
        if m.status in ("error", "limit"):
            self.anomalies.append(f"`{key}`: {shown}" + (f" — {m.note}" if m.note else "") + (f" (log: `{m.log}`)" if m.log and m.status != "error" else ""))
        return m

    def skip(self, key, why):
        return self.record(key, M("skipped", note=why))

    # -- shapes ----------------------------------------------------------------------------

    def shapes(self):
        peer_ns = self.a.n
        all_ns = sorted(set(peer_ns) | set(self.a.heddle_n))
        for n in all_ns:
            for shape in self.a.shapes:
                self.empty_trash()
                tools = [t for t in self.a.tools if t in ("heddle", "floor", "floorsh") or n in peer_ns]
                for tool in tools:
                    print(f"== {shape} N={n} {tool}", flush=True)
                    getattr(self, f"shape_{tool}")(shape, n)
                if shape == "matrix" and n not in peer_ns and "heddle" in self.a.tools:
                    # `cat {{ in.all }}` puts every member's path into the one `sh -c` argument,
                    # which Linux caps at 128 KiB (MAX_ARG_STRLEN): at 10,000 members heddle cannot
                    # start it. This variant gathers through {{ in.all.dir }} to measure the rest.
                    print(f"== matrix-dir N={n} heddle", flush=True)
                    self.shape_heddle("matrix-dir", n)

    def fresh(self, template, proj):
        if proj.exists():
            self.discard(proj)
        shutil.copytree(template, proj, symlinks=True)

    def gen_dir(self, tool, shape, n):
        base = self.runs / f"{shape}-{n}" / tool
        if base.exists():
            self.discard(base)
        tmpl = base / "template"
        tmpl.mkdir(parents=True)
        (tmpl / "src.txt").write_text("source v0\n")
        return base, tmpl

    def source_changer(self, proj):
        def change(i):
            # Content never seen before (heddle keeps every key it has seen).
            (proj / "src.txt").write_text(f"source changed {time.time_ns()} {i}\n")

        return change

    def run_phases(self, tool, shape, n, tmpl, proj, plan_cmd, run_cmd, prepare=None, final=None):
        k = f"{tool}/{shape}/{n}"

        def fresh(_i):
            self.fresh(tmpl, proj)
            if prepare:
                prepare()

        if plan_cmd and "plan" in self.a.phases:
            self.measure(f"{k}/plan", plan_cmd, proj, setup=fresh)
        check = (lambda: self.check_output(tool, shape, n, proj / final)) if final else None
        full = self.measure(f"{k}/full", run_cmd, proj, setup=fresh, check=check)
        if not full.ok() and self.a.finish_after_limit and full.status == "limit":
            st, secs, log = self.timed(run_cmd, proj, None, tag=f"{k}/finish")
            print(f"  (finished {k} untimed after the limit: {st}, {secs:.1f} s)")
            if st == "ok":
                full.note = f"finished untimed in {secs:.1f} s to measure the later phases"
                full = M("ok")
        if not full.ok():
            for ph in ("noop1", "noop", "incr"):
                self.skip(f"{k}/{ph}", "first full run did not finish")
            return
        # The first no-op after a run is what a user sees; it can differ (stat caches warming up).
        if "noop1" in self.a.phases:
            self.measure(f"{k}/noop1", run_cmd, proj, reps=1)
        if "noop" in self.a.phases:
            self.measure(f"{k}/noop", run_cmd, proj)
        if "incr" in self.a.phases:
            self.measure(f"{k}/incr", run_cmd, proj, setup=self.source_changer(proj), check=check)

    def check_output(self, tool, shape, n, path):
        ref = self.reference(shape.replace("-dir", ""), n)
        if not path.exists():
            return f"final output {path} missing"
        got = path.read_bytes()
        want = ref.replace(b"source v0\n", b"")
        # The reference is built from "source v0"; an incremental run has a changed source line.
        got_norm = re.sub(rb"source (v0|changed [0-9]+ [0-9]+)\n", b"", got)
        if got_norm != want:
            if sorted(got_norm.splitlines()) == sorted(want.splitlines()):
                self.anomalies.append(f"`{tool}/{shape}/{n}`: final output has the right lines in another order")
                return None
            return f"final output {path} differs from the shell loop's ({len(got)} vs {len(ref)} bytes)"
        return None

    def reference(self, shape, n):
        """The final output the shell loop produces (from src.txt = 'source v0')."""
        key = (shape, n)
        if not hasattr(self, "_refs"):
            self._refs = {}
        if key not in self._refs:
            d = self.runs / f"{shape}-{n}" / "reference"
            if d.exists():
                self.discard(d)
            d.mkdir(parents=True)
            (d / "src.txt").write_text("source v0\n")
            (d / "floor.sh").write_text(floor_script(shape, n))
            subprocess.run(["bash", "floor.sh"], cwd=d, check=True)
            self._refs[key] = (d / final_file(shape, n)).read_bytes()
        return self._refs[key]

    def shape_floor(self, shape, n):
        base, tmpl = self.gen_dir("floor", shape, n)
        (tmpl / "floor.sh").write_text(floor_script(shape, n))
        proj = base / "proj"
        self.fresh(tmpl, proj)
        k = f"floor/{shape}/{n}"
        self.measure(f"{k}/full", ["bash", "floor.sh"], proj,
                     check=lambda: self.check_output("floor", shape, n, proj / final_file(shape, n)))

    def shape_floorsh(self, shape, n):
        """The loop again, each command through its own `sh -c` (as every tool runs a stage)."""
        base, tmpl = self.gen_dir("floorsh", shape, n)
        (tmpl / "floor.sh").write_text(floor_script(shape, n, sh_c=True))
        proj = base / "proj"
        self.fresh(tmpl, proj)
        self.measure(f"floorsh/{shape}/{n}/full", ["bash", "floor.sh"], proj,
                     check=lambda: self.check_output("floorsh", shape, n, proj / final_file(shape, n)))

    def shape_heddle(self, shape, n):
        base, tmpl = self.gen_dir("heddle", shape, n)
        shape, variant = shape.replace("-dir", ""), shape
        (tmpl / "heddle.toml").write_text(heddle_pipeline(variant, n))
        proj = base / "proj"
        cache = base / "cache"
        env = dict(self.env, HEDDLE_CACHE_DIR=str(cache))
        self.env_heddle = env
        h = self.bin / "heddle"

        def prepare():
            if cache.exists():
                self.discard(cache)

        label = f"s{n - 1}" if shape == "chain" else "gather"
        final = Path("out") / shape.replace("-dir", "") / label / "o.txt"
        saved = self.env
        self.env = env
        try:
            self.run_phases(
                "heddle", variant, n, tmpl, proj,
                [h, "--root", ".", "plan", "heddle.toml"],
                [h, "--root", ".", "run", "heddle.toml", "-j", str(self.a.jobs), "--progress", "quiet"],
                prepare=prepare, final=final,
            )
        finally:
            self.env = saved

    def shape_snakemake(self, shape, n, deep=False):
        base, tmpl = self.gen_dir("snakemake", shape, n)
        (tmpl / "Snakefile").write_text(snakefile(shape, n))
        proj = base / "proj"
        sm = [self.venv / "snakemake"]
        if deep:
            sm = [self.venv / "python", Path(__file__).with_name("snakemake_deep.py")]
        self.run_phases(
            "snakemake", shape, n, tmpl, proj,
            sm + ["-n", "--cores", str(self.a.jobs)],
            sm + ["--cores", str(self.a.jobs)],
            final=final_file(shape, n),
        )
        k = f"snakemake/{shape}/{n}"
        if deep:
            for ph in PHASES:
                if f"{k}/{ph}" in self.results:
                    self.results[f"{k}/{ph}"].note = (DEEP + " " + self.results[f"{k}/{ph}"].note).strip()
            return
        logs = [self.results[f"{k}/{ph}"].log for ph in ("plan", "full") if f"{k}/{ph}" in self.results]
        if any("RecursionError" in Path(lg).read_text(errors="replace") for lg in logs if lg):
            self.anomalies.append(
                f"`{k}`: Snakemake {'plan and run' if len(logs) > 1 else 'run'} stop with \"RecursionError: maximum "
                f"recursion depth exceeded\" while building the DAG of a {n}-deep chain; measured again "
                f"through benches/peers/snakemake_deep.py (Python recursion limit raised), marked †")
            print("  (Snakemake hit Python's recursion limit; again with snakemake_deep.py)", flush=True)
            self.shape_snakemake(shape, n, deep=True)

    def shape_dvc(self, shape, n):
        base, tmpl = self.gen_dir("dvc", shape, n)
        (tmpl / "dvc.yaml").write_text(dvc_yaml(shape, n))
        (tmpl / ("s" if shape == "chain" else "m")).mkdir()  # dvc repro does not create output folders
        self.dvc_init(tmpl)
        proj = base / "proj"
        dvc = self.venv / "dvc"
        self.run_phases(
            "dvc", shape, n, tmpl, proj,
            [dvc, "status"],  # `dvc repro --dry` fails on a fresh project: downstream deps do not exist yet
            [dvc, "repro"],
            final=final_file(shape, n),
        )

    def dvc_init(self, d):
        git = ["git", "-c", "init.defaultBranch=main", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        for cmd in (
            git + ["init", "-q"],
            [self.venv / "dvc", "init", "-q"],
            [self.venv / "dvc", "config", "core.analytics", "false"],
            [self.venv / "dvc", "config", "core.check_update", "false"],
        ):
            subprocess.run([str(c) for c in cmd], cwd=d, env=self.env, check=True, stdout=subprocess.DEVNULL)

    # -- large artefacts -------------------------------------------------------------------

    def large(self):
        gen = self.a.big_cmd.replace("SIZE", self.a.big_size)
        size = parse_size(self.a.big_size)
        # heddle
        base = self.runs / "large" / "heddle"
        if base.exists():
            self.discard(base)
        proj = base / "proj"
        proj.mkdir(parents=True)
        cache = base / "cache"
        env = dict(self.env, HEDDLE_CACHE_DIR=str(cache))
        (proj / "seed.txt").write_text("seed\n")
        (proj / "heddle.toml").write_text(
            '[pipeline]\nname = "large"\n\n[stages.big]\n'
            'inputs = { seed = { path = "seed.txt" } }\n'
            f'run = "{gen} > {{{{ out.o }}}}"\n'
            'outputs = { o = "big.bin" }\n'
        )
        h = self.bin / "heddle"
        run = [h, "--root", ".", "run", "heddle.toml", "-j", str(self.a.jobs), "--progress", "quiet"]
        out = proj / "out" / "large" / "big" / "big.bin"

        def size_ok():
            if not out.exists():
                return f"{out} missing"
            if out.stat().st_size != size:
                return f"{out} has {out.stat().st_size} bytes, not {size}"
            return None

        print("== large heddle", flush=True)
        first = self.measure("heddle/large/full", run, proj, env=env, reps=1, check=size_ok)
        if first.ok():
            self.measure("heddle/large/noop1", run, proj, env=env, reps=1, check=size_ok)
            self.measure("heddle/large/noop", run, proj, env=env, check=size_ok)
            self.measure("heddle/large/restore", run, proj, env=env, setup=lambda i: out.unlink(), check=size_ok)
            st = out.stat()
            self.link_note = (
                f"heddle's restored output: st_nlink = {st.st_nlink} "
                f"({'hardlink into the cache' if st.st_nlink > 1 else 'reflink or copy'})"
            )
            self.measure("heddle/large/verify", [h, "cache", "verify"], proj, env=env, reps=min(3, self.a.reps))
        else:
            for ph in ("noop1", "noop", "restore", "verify"):
                self.skip(f"heddle/large/{ph}", "first run did not finish")
        # DVC
        if "dvc" in self.a.tools:
            print("== large dvc", flush=True)
            base = self.runs / "large" / "dvc"
            if base.exists():
                self.discard(base)
            proj = base / "proj"
            proj.mkdir(parents=True)
            (proj / "seed.txt").write_text("seed\n")
            (proj / "dvc.yaml").write_text(
                f"stages:\n  big:\n    cmd: {gen} > big.bin\n    deps:\n    - seed.txt\n    outs:\n    - big.bin\n"
            )
            self.dvc_init(proj)
            dvc = self.venv / "dvc"
            out = proj / "big.bin"
            first = self.measure("dvc/large/full", [dvc, "repro"], proj, reps=1, check=size_ok)
            if first.ok():
                self.measure("dvc/large/noop1", [dvc, "repro"], proj, reps=1, check=size_ok)
                self.measure("dvc/large/noop", [dvc, "repro"], proj, check=size_ok)
                self.measure("dvc/large/restore", [dvc, "repro"], proj, setup=lambda i: out.unlink(), check=size_ok)
                self.measure("dvc/large/checkout", [dvc, "checkout"], proj, setup=lambda i: out.unlink(), check=size_ok)
            else:
                for ph in ("noop1", "noop", "restore", "checkout"):
                    self.skip(f"dvc/large/{ph}", "first run did not finish")
        self.results["dvc/large/verify"] = M("n/a", note="DVC has no command that re-hashes its cache")

    # -- hashing ---------------------------------------------------------------------------

    def hashing(self):
        print("== hash", flush=True)
        d = self.runs / "hash"
        d.mkdir(parents=True, exist_ok=True)
        f = d / "1GiB.bin"
        if not f.exists() or f.stat().st_size != 1 << 30:
            subprocess.run(["bash", "-c", f"{self.a.big_cmd.replace('SIZE', '1G')} > {f}"], check=True)
        subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        digests = {}
        for name, cmd in (
            ("heddle", [self.bin / "hash_bench", f, "1"]),
            ("sha256sum", ["sha256sum", f]),
            ("openssl", ["openssl", "dgst", "-sha256", f]),
        ):
            key = f"{name}/hash/1GiB"
            m = self.measure(key, cmd, d)
            if m.ok():
                found = re.search(r"\b([0-9a-f]{64})\b", Path(m.log).read_text(errors="replace"))
                if found:
                    digests[name] = found.group(1)
                else:
                    self.record(key, M("error", note="no sha256 digest in the output", log=m.log))
        if len(set(digests.values())) > 1:
            self.anomalies.append(f"hash: the digests differ: {digests}")
        self.hash_digests = digests

    # -- containers ------------------------------------------------------------------------

    def containers(self):
        print("== containers", flush=True)
        image = self.a.image
        n = self.a.container_n
        d = self.runs / "containers"
        d.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["docker", "image", "inspect", image], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["bash", str(self.repo / "tests/images/build-busybox.sh")], check=False)
        # warm-up
        subprocess.run(["docker", "run", "--rm", image, "true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        st, secs, log = self.timed([self.bin / "overhead", str(n), image, "true"], d, self.a.limit, tag="heddle_container_overhead")
        if st == "ok":
            m = re.search(r"median_ms\s+([0-9.]+)", Path(log).read_text())
            if m:
                self.record("heddle/container/run", M("ok", float(m.group(1)) / 1000, note=f"median of {n}, overhead example (network none, init)", log=log))
            else:
                self.record("heddle/container/run", M("error", note="no median_ms line", log=log))
        else:
            self.record("heddle/container/run", M(st, note=tail(log), log=log))
        self.measure("docker/container/run", ["docker", "run", "--rm", image, "true"], d, reps=n, limit=60)
        self.measure("docker-none-init/container/run",
                     ["docker", "run", "--rm", "--network", "none", "--init", image, "true"], d, reps=n, limit=60)
        script = self.repo / "benches" / "container.sh"
        if script.exists() and self.a.container_sh:
            st, secs, log = self.timed(["bash", script], self.repo, max(self.a.limit, 600), tag="container.sh")
            text = Path(log).read_text(errors="replace")
            self.container_sh = (st, secs, text[-3000:])
            for key, label in (("heddle-binary", "heddle run --no-cache"),
                               ("docker-sh", "docker run --rm "), ("docker-none-sh", "docker run --rm --network none")):
                m = re.search(r"^\s*" + re.escape(label.strip()) + r"\s+([0-9.]+)\s*$", text, re.M)
                if m:
                    self.record(f"{key}/container/run", M("ok", float(m.group(1)) / 1000, note="benches/container.sh", log=log))
            if st != "ok":
                self.anomalies.append(f"benches/container.sh: {st} after {secs:.1f} s (log: `{log}`)")
        else:
            self.container_sh = None

    # -- report ----------------------------------------------------------------------------

    def versions(self):
        def out(cmd):
            try:
                r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=self.env, timeout=60)
                return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else "?"
            except Exception as e:  # noqa: BLE001
                return f"unavailable ({e.__class__.__name__})"

        rev = out(["git", "-C", self.repo, "rev-parse", "--short", "HEAD"])
        dirty = subprocess.run(["git", "-C", str(self.repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return {
            "heddle": f"{out([self.bin / 'heddle', '--version'])} (checkout at commit {rev}{', with uncommitted changes in the work tree' if dirty else ''}; "
                      f"binary from {mtime(self.bin / 'heddle')})",
            "DVC": out([self.venv / "dvc", "--version"]),
            "Snakemake": out([self.venv / "snakemake", "--version"]),
            "Python (peers)": out([self.venv / "python", "-V"]),
            "git": out(["git", "--version"]),
            "bash": out(["bash", "--version"]),
            "sha256sum": out(["sha256sum", "--version"]),
            "openssl": out(["openssl", "version"]),
            "docker": out(["docker", "version", "--format", "server {{.Server.Version}}, client {{.Client.Version}}"]),
        }


def mtime(p):
    try:
        return dt.datetime.fromtimestamp(Path(p).stat().st_mtime).astimezone().strftime("%Y-%m-%d %H:%M %z")
    except OSError:
        return "?"


def human(s):
    m = re.fullmatch(r"([0-9]+)([KMG]?)", s.strip().upper())
    return f"{m.group(1)} {dict(K='KiB', M='MiB', G='GiB').get(m.group(2), 'bytes')}" if m else s


def parse_size(s):
    m = re.fullmatch(r"([0-9]+)([KMG]?)", s.strip().upper())
    if not m:
        raise SystemExit(f"--big-size {s!r}: expected e.g. 1G, 256M")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def tail(log, n=3):
    try:
        lines = [ln for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-n:])[:400]
    except OSError:
        return ""


DEEP = "[deep]"


def fmt(m, limit=None):
    if m is None:
        return "—"
    mark = " †" if DEEP in (m.note or "") else ""
    if m.status == "ok":
        return fsec(m.value) + mark
    if m.status == "limit":
        return f"> {m.value:g} s{mark}"
    if m.status == "skipped":
        return "skipped"
    if m.status == "n/a":
        return "n/a"
    return "error"


def fsec(v):
    if v is None:
        return "—"
    if v < 1:
        return f"{v * 1000:.1f} ms"
    return f"{v:.2f} s"


# --------------------------------------------------------------------------------------------
# pipelines (the same commands everywhere; paths are relative to the project folder)


def final_file(shape, n):
    return Path("s") / f"{n - 1}.txt" if shape == "chain" else Path("gather.txt")


def floor_commands(shape, n):
    if shape == "chain":
        cmds = ["cat src.txt > s/0.txt"] + [f"cat s/{i - 1}.txt > s/{i}.txt" for i in range(1, n)]
    else:
        cmds = [f"echo {i} | cat src.txt - > m/{i}.txt" for i in range(n)]
        cmds.append("cat " + " ".join(f"m/{i}.txt" for i in range(n)) + " > gather.txt")
    return cmds


def floor_script(shape, n, sh_c=False):
    d = "s" if shape == "chain" else "m"
    cmds = floor_commands(shape, n)
    if sh_c:
        cmds = [f"sh -c '{c}'" for c in cmds]
    return "set -e\nmkdir -p " + d + "\n" + "\n".join(cmds) + "\n"


def heddle_pipeline(shape, n):
    variant, shape = shape, shape.replace("-dir", "")
    L = [f'[pipeline]\nname = "{shape}"\n']
    src = 'src = { path = "src.txt" }'
    if shape == "chain":
        L.append(f'[stages.s0]\ninputs = {{ {src} }}\nrun = "cat {{{{ in.src }}}} > {{{{ out.o }}}}"\noutputs = {{ o = "o.txt" }}\n')
        for i in range(1, n):
            L.append(f'[stages.s{i}]\ninputs = {{ prev = "s{i - 1}.o" }}\nrun = "cat {{{{ in.prev }}}} > {{{{ out.o }}}}"\noutputs = {{ o = "o.txt" }}\n')
    elif shape == "fan":
        for i in range(n):
            L.append(f'[stages.m{i}]\ninputs = {{ {src} }}\nrun = "echo {i} | cat {{{{ in.src }}}} - > {{{{ out.o }}}}"\noutputs = {{ o = "o.txt" }}\n')
        ins = ", ".join(f'a{i} = "m{i}.o"' for i in range(n))
        cat = " ".join(f"{{{{ in.a{i} }}}}" for i in range(n))
        L.append(f'[stages.gather]\ninputs = {{ {ins} }}\nrun = "cat {cat} > {{{{ out.o }}}}"\noutputs = {{ o = "o.txt" }}\n')
    else:
        vals = ", ".join(str(i) for i in range(n))
        L.append(f'[stages.m]\nmatrix = {{ i = [{vals}] }}\ninputs = {{ {src} }}\nrun = "echo {{{{ matrix.i }}}} | cat {{{{ in.src }}}} - > {{{{ out.o }}}}"\noutputs = {{ o = "o.txt" }}\n')
        if variant == "matrix-dir":
            # members are in.all.dir/i=K/o.txt; cat them in matrix order
            L.append('[stages.gather]\ninputs = { all = "m[*].o" }\n'
                     'run = "cd {{ in.all.dir }} && printf \'%s\\\\n\' */o.txt | sort -t= -k2,2n | xargs cat > {{ out.o }}"\n'
                     'outputs = { o = "o.txt" }\n')
        else:
            L.append('[stages.gather]\ninputs = { all = "m[*].o" }\nrun = "cat {{ in.all }} > {{ out.o }}"\noutputs = { o = "o.txt" }\n')
    return "\n".join(L)


def snakefile(shape, n):
    L = []
    if shape == "chain":
        L.append(f'rule all:\n    input: "s/{n - 1}.txt"\n')
        L.append('rule s0:\n    input: "src.txt"\n    output: "s/0.txt"\n    shell: "cat {input} > {output}"\n')
        for i in range(1, n):
            L.append(f'rule s{i}:\n    input: "s/{i - 1}.txt"\n    output: "s/{i}.txt"\n    shell: "cat {{input}} > {{output}}"\n')
    elif shape == "fan":
        L.append('rule all:\n    input: "gather.txt"\n')
        for i in range(n):
            L.append(f'rule m{i}:\n    input: "src.txt"\n    output: "m/{i}.txt"\n    shell: "echo {i} | cat {{input}} - > {{output}}"\n')
        ins = ", ".join(f'"m/{i}.txt"' for i in range(n))
        L.append(f'rule gather:\n    input: [{ins}]\n    output: "gather.txt"\n    shell: "cat {{input}} > {{output}}"\n')
    else:
        L.append(f"N = {n}\n")
        L.append('rule all:\n    input: "gather.txt"\n')
        L.append('rule m:\n    input: "src.txt"\n    output: "m/{i}.txt"\n    shell: "echo {wildcards.i} | cat {input} - > {output}"\n')
        L.append('rule gather:\n    input: expand("m/{i}.txt", i=range(N))\n    output: "gather.txt"\n    shell: "cat {input} > {output}"\n')
    return "\n".join(L)


def dvc_yaml(shape, n):
    L = ["stages:"]
    if shape == "chain":
        L.append("  s0:\n    cmd: cat src.txt > s/0.txt\n    deps: [src.txt]\n    outs: [s/0.txt]")
        for i in range(1, n):
            L.append(f"  s{i}:\n    cmd: cat s/{i - 1}.txt > s/{i}.txt\n    deps: [s/{i - 1}.txt]\n    outs: [s/{i}.txt]")
    else:
        if shape == "fan":
            for i in range(n):
                L.append(f"  m{i}:\n    cmd: echo {i} | cat src.txt - > m/{i}.txt\n    deps: [src.txt]\n    outs: [m/{i}.txt]")
        else:
            vals = ", ".join(str(i) for i in range(n))
            L.append(f"  m:\n    foreach: [{vals}]\n    do:\n      cmd: echo ${{item}} | cat src.txt - > m/${{item}}.txt\n"
                     "      deps:\n      - src.txt\n      outs:\n      - m/${item}.txt")
        files = [f"m/{i}.txt" for i in range(n)]
        L.append(f"  gather:\n    cmd: cat {' '.join(files)} > gather.txt\n    deps: [{', '.join(files)}]\n    outs: [gather.txt]")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------------
# RESULTS.md


def ratio(h, p):
    """heddle/peer as text, and the numeric upper bound (for targets)."""
    if h is None or p is None or not h.ok():
        return "—", None
    if p.status == "ok" and p.value:
        r = h.value / p.value
        return f"{r:.3g}", r
    if p.status == "limit":
        r = h.value / p.value
        return f"< {r:.3g}", r
    return "—", None


def write_report(b: Bench, path: Path, started, ended, load0, load1, cmdline, elapsed):
    R = b.results
    a = b.a
    mem = "?"
    try:
        for ln in open("/proc/meminfo"):
            if ln.startswith("MemTotal"):
                mem = f"{int(ln.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    cpu = "?"
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    fs = subprocess.run(["findmnt", "-no", "FSTYPE,OPTIONS", "-T", str(b.work)], capture_output=True, text=True).stdout.strip() or "?"
    out = []
    w = out.append
    w("# heddle vs DVC vs Snakemake: results\n")
    w(f"Generated by `{cmdline}` (benches/peers/run.sh; bench.py describes the method). "
      f"The run took {elapsed / 60:.1f} min.\n")
    w("## Machine\n")
    w("| what | value |\n|---|---|")
    w(f"| nproc | {os.cpu_count()} |")
    w(f"| CPU | {cpu} |")
    w(f"| memory | {mem} |")
    w(f"| kernel | {platform.release()} |")
    w(f"| filesystem of the work dir | {fs} |")
    w(f"| started | {started} |")
    w(f"| ended | {ended} |")
    w(f"| load average (1, 5, 15 min) at start | {load0} |")
    w(f"| load average at end | {load1} |")
    w("")
    if a.note:
        w(f"**Note:** {a.note}\n")
    w("## Tool versions\n")
    w("| tool | version |\n|---|---|")
    for k, v in (getattr(b, "saved_versions", None) or b.versions()).items():
        w(f"| {k} | {v} |")
    w("")
    w("## Method\n")
    w(f"- Shapes: `chain` (stage i runs `cat` of stage i−1's output), `fan` (src.txt → N stages "
      f"`echo i | cat src.txt -` → one `cat` gather), `matrix` (the fan as one template: heddle "
      f"`matrix = {{ i = [0..N) }}` + `m[*].o` gather, DVC `foreach`, Snakemake a wildcard rule + "
      f"`expand()`). Chain and fan are written out stage by stage for every tool (N heddle stages, N "
      f"DVC stages, N Snakemake rules).")
    w(f"- Phases: plan = `heddle plan`, `dvc status` (`dvc repro --dry` fails on a fresh multi-stage project: it stats the not yet built deps), `snakemake -n` on a fresh copy of the "
      f"project; full = first run on a fresh copy (heddle with an empty cache, `-j {a.jobs}`; Snakemake "
      f"`--cores {a.jobs}`; **DVC `repro` runs stages one at a time, it has no parallel mode**); "
      f"no-op = the same command again; incremental = after writing new content to src.txt (every stage "
      f"depends on it, so everything downstream reruns).")
    w("- †: Snakemake stopped with a RecursionError on this chain; the number is from "
      "`benches/peers/snakemake_deep.py` (Snakemake with Python's recursion limit raised).")
    w(f"- Floor: `bash floor.sh`, the same commands one after another in one shell (the ratios use this one); "
      f"also shown, the same loop with each command in its own `sh -c`, as every tool starts a stage.")
    w(f"- Each number is the median of up to {a.reps} runs (one run when the first took over {a.long:g} s), "
      f"timed from spawn to exit; limit {a.limit:g} s per measurement (\"> limit\" when hit; the later phases "
      f"of that project are then skipped). Every full and incremental run's final output is checked "
      f"against the shell loop's.")
    w("")

    ns = sorted(set(a.n) | set(a.heddle_n))
    if "shapes" in a.only:
        w("## Medians (wall time)\n")
        w("| shape | N | phase | heddle | DVC | Snakemake | shell loop | loop, `sh -c` each |\n|---|---:|---|---:|---:|---:|---:|---:|")
        extra = ["matrix-dir"] if any(k.startswith("heddle/matrix-dir/") for k in R) else []
        for shape in a.shapes + extra:
            for n in ns:
                for ph in PHASES:
                    row = [fmt(R.get(f"{t}/{shape}/{n}/{ph}")) if (t == "heddle" or n in a.n) else "—"
                           for t in ("heddle", "dvc", "snakemake")]
                    fl = fmt(R.get(f"floor/{shape}/{n}/full")) if ph in ("full", "incr") and f"floor/{shape}/{n}/full" in R else "—"
                    if shape == "matrix-dir":
                        row = [fmt(R.get(f"heddle/{shape}/{n}/{ph}")), "—", "—"]
                    fs = fmt(R.get(f"floorsh/{shape}/{n}/full")) if ph in ("full", "incr") and f"floorsh/{shape}/{n}/full" in R else "—"
                    if all(x == "—" for x in row + [fl, fs]):
                        continue
                    w(f"| {shape} | {n} | {PHASE_NAMES[ph]} | {' | '.join(row)} | {fl} | {fs} |")
        w("")
        w("## Ratios (heddle ÷ other; below 1 means heddle is faster)\n")
        w("| shape | N | phase | heddle/DVC | heddle/Snakemake | heddle/faster peer | heddle/shell loop |\n|---|---:|---|---:|---:|---:|---:|")
        for shape in a.shapes + extra:
            for n in ns:
                for ph in PHASES:
                    h = R.get(f"heddle/{shape}/{n}/{ph}")
                    if h is None:
                        continue
                    d, s = R.get(f"dvc/{shape}/{n}/{ph}"), R.get(f"snakemake/{shape}/{n}/{ph}")
                    fl = R.get(f"floor/{shape.replace('-dir', '')}/{n}/full") if ph in ("full", "incr") else None
                    best = faster(d, s)
                    w(f"| {shape} | {n} | {PHASE_NAMES[ph]} | {ratio(h, d)[0]} | {ratio(h, s)[0]} | "
                      f"{ratio(h, best)[0]} | {ratio(h, fl)[0]} |")
        w("")

    if "large" in a.only:
        w(f"## Large artefact ({human(a.big_size)})\n")
        w(f"One stage writes {human(a.big_size)} (`{a.big_cmd.replace('SIZE', a.big_size)}`).\n")
        w("| step | heddle | DVC |\n|---|---:|---:|")
        for ph, name in (("full", "first run"), ("noop1", "first no-op rerun (once)"), ("noop", "no-op rerun (median)"),
                         ("restore", "restore after deleting the output (`heddle run` / `dvc repro`)"),
                         ("checkout", "restore by `dvc checkout`"), ("verify", "`heddle cache verify`")):
            w(f"| {name} | {fmt(R.get(f'heddle/large/{ph}'))} | {fmt(R.get(f'dvc/large/{ph}'))} |")
        w("")
        if getattr(b, "link_note", None):
            w(f"{b.link_note}; DVC's default link type is `reflink,copy` (a copy, as this filesystem has no reflink).\n")

    if "hash" in a.only:
        w("## sha256 of a 1 GiB file (warm page cache)\n")
        w("| hasher | time | GiB/s |\n|---|---:|---:|")
        for name, label in (("heddle", "heddle (`hash_bench` example, `heddle_cache::hash_file`)"),
                            ("sha256sum", "`sha256sum`"), ("openssl", "`openssl dgst -sha256`")):
            m = R.get(f"{name}/hash/1GiB")
            gibs = f"{1 / m.value:.2f}" if m and m.ok() else "—"
            w(f"| {label} | {fmt(m)} | {gibs} |")
        w("")

    if "containers" in a.only:
        w(f"## Container stage (median of {a.container_n})\n")
        w("| what | median |\n|---|---:|")
        w(f"| heddle's engine wrapper: create → start → wait → remove (`overhead` example; network none, init) | {fmt(R.get('heddle/container/run'))} |")
        w(f"| `docker run --rm {a.image} true` | {fmt(R.get('docker/container/run'))} |")
        w(f"| `docker run --rm --network none --init {a.image} true` | {fmt(R.get('docker-none-init/container/run'))} |")
        for key, label in (("heddle-binary", "benches/container.sh: `heddle run --no-cache` of a one-stage container pipeline"),
                           ("docker-none-sh", "benches/container.sh: `docker run --rm --network none`"),
                           ("docker-sh", "benches/container.sh: `docker run --rm`")):
            if f"{key}/container/run" in R:
                w(f"| {label} | {fmt(R.get(f'{key}/container/run'))} |")
        w("")
        cs = getattr(b, "container_sh", None)
        if cs:
            w(f"benches/container.sh ({cs[0]}, {cs[1]:.1f} s), last lines:\n\n```\n{cs[2].strip()}\n```\n")
        else:
            w("benches/container.sh (the full heddle-binary container stage) did not exist at the time of this run.\n")

    w("## Targets (issue 6)\n")
    w("| target | measured | |\n|---|---|---|")
    for t in targets(b):
        w(f"| {t[0]} | {t[1]} | {t[2]} |")
    w("")
    obs = Path(__file__).with_name("observations.md")
    if obs.exists() and not a.smoke:
        w("## Observations (hand-written from the run above; re-check them after regenerating)\n")
        w(obs.read_text().strip() + "\n")
    w("## Anomalies recorded by the harness\n")
    if b.anomalies:
        for x in b.anomalies:
            w(f"- {x}")
    else:
        w("- none recorded by the harness")
    w("")
    path.write_text("\n".join(out) + "\n")


def faster(d, s):
    c = [m for m in (d, s) if m is not None and m.status in ("ok", "limit")]
    if not c:
        return None
    ok = [m for m in c if m.ok()]
    if ok:
        return min(ok, key=lambda m: m.value)
    return max(c, key=lambda m: m.value)


def targets(b):
    R = b.results
    a = b.a
    T = []

    def verdict(x):
        return "**met**" if x else "**missed**"

    n = 1000
    if n in a.n and "shapes" in a.only:
        for ph, name in (("plan", "plan"), ("noop", "no-op")):
            for shape in a.shapes:
                h = R.get(f"heddle/{shape}/{n}/{ph}")
                best = faster(R.get(f"dvc/{shape}/{n}/{ph}"), R.get(f"snakemake/{shape}/{n}/{ph}"))
                txt, r = ratio(h, best)
                if r is None:
                    T.append((f"{name}, {shape} N=1000: ≥ 20× faster than the faster peer", f"heddle {fmt(h)}, peers {fmt(best)}", "not measured"))
                else:
                    T.append((f"{name}, {shape} N=1000: ≥ 20× faster than the faster peer",
                              f"heddle {fmt(h)} vs {fmt(best)}: {1 / r:.1f}×{' (peer hit the limit)' if best.status == 'limit' else ''}",
                              verdict(1 / r >= 20)))
        for shape in a.shapes:
            h = R.get(f"heddle/{shape}/{n}/noop")
            T.append((f"no-op, {shape} N=1000: under 0.3 s", fmt(h), verdict(h.value < 0.3) if h and h.ok() else "not measured"))
        h, fl = R.get(f"heddle/chain/{n}/full"), R.get(f"floor/chain/{n}/full")
        txt, r = ratio(h, fl)
        T.append(("full run, chain N=1000: within 1.5× the shell loop", f"heddle {fmt(h)} vs loop {fmt(fl)}: {txt}×",
                  verdict(r <= 1.5) if r is not None else "not measured"))
    if "large" in a.only:
        m = R.get("heddle/large/restore")
        T.append((f"{human(a.big_size)}: restore under 50 ms (target is for 1 GiB)", fmt(m), verdict(m.value < 0.05) if m and m.ok() else "not measured"))
        m = R.get("heddle/large/noop")
        T.append((f"{human(a.big_size)}: no-op under 100 ms (target is for 1 GiB)", fmt(m), verdict(m.value < 0.1) if m and m.ok() else "not measured"))
    if "hash" in a.only:
        h, s = R.get("heddle/hash/1GiB"), R.get("sha256sum/hash/1GiB")
        if h and s and h.ok() and s.ok():
            T.append(("hashing ≥ 90% of sha256sum's throughput", f"{s.value / h.value * 100:.0f}% ({fsec(h.value)} vs {fsec(s.value)})", verdict(s.value / h.value >= 0.9)))
        else:
            T.append(("hashing ≥ 90% of sha256sum's throughput", "—", "not measured"))
    if "containers" in a.only:
        hb, db = R.get("heddle-binary/container/run"), R.get("docker-sh/container/run")
        if hb and db and hb.ok() and db.ok():
            T.append(("container stage ≤ 1.0× `docker run --rm` (heddle binary, benches/container.sh)",
                      f"{hb.value / db.value:.2f}× ({fsec(hb.value)} vs {fsec(db.value)})", verdict(hb.value <= db.value)))
        dn = R.get("docker-none-sh/container/run")
        if hb and dn and hb.ok() and dn.ok():
            T.append(("the same, against `docker run --rm --network none` (the isolation heddle gives a stage)",
                      f"{hb.value / dn.value:.2f}× ({fsec(hb.value)} vs {fsec(dn.value)})", verdict(hb.value <= dn.value)))
        h, d = R.get("heddle/container/run"), R.get("docker/container/run")
        if h and d and h.ok() and d.ok():
            T.append(("container stage ≤ 1.0× `docker run --rm`",
                      f"{h.value / d.value:.2f}× ({fsec(h.value)} vs {fsec(d.value)}; engine wrapper, not yet the heddle binary)",
                      verdict(h.value <= d.value)))
        else:
            T.append(("container stage ≤ 1.0× `docker run --rm`", "—", "not measured"))
    return T


# --------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--n", default=None, help="N for every tool, comma-separated (default 100,1000)")
    p.add_argument("--heddle-n", default=None, help="extra N for heddle alone (default 10000; none with --quick/--smoke)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--only", default="shapes,large,hash,containers", help="sections: shapes,large,hash,containers")
    p.add_argument("--reps", type=int, default=None, help="runs per short measurement (default 5)")
    p.add_argument("--limit", type=float, default=None, help="seconds per measurement (default 300)")
    p.add_argument("--long", type=float, default=10.0, help="a first sample longer than this is not repeated")
    p.add_argument("--jobs", "-j", type=int, default=2)
    p.add_argument("--mem-limit", default="8G", help="address-space limit (RLIMIT_AS) per measured process; 0 for none")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds to wait after deleting a large tree (ext4 without a journal; default 35, 0 with --smoke)")
    p.add_argument("--container-n", type=int, default=None)
    p.add_argument("--image", default="heddle-test/busybox:latest")
    p.add_argument("--big-cmd", default="head -c SIZE /dev/urandom", help="the large stage's generator; SIZE is replaced")
    p.add_argument("--big-size", default=None, help="the large stage's output size (default 1G; 256M with --smoke)")
    p.add_argument("--phases", default=None, help="shape phases: plan,full,noop1,noop,incr (default all; --smoke: plan,full,noop1)")
    p.add_argument("--container-sh", default=None, choices=["yes", "no"], help="also run benches/container.sh when it exists (default yes; no with --smoke)")
    p.add_argument("--finish-after-limit", action="store_true",
                   help="when a first full run hits the limit, finish it untimed so no-op/incremental get measured")
    p.add_argument("--quick", action="store_true", help="N = 100, 3 runs per measurement")
    p.add_argument("--smoke", action="store_true", help="CI: N = 100, one run, short limits; exit 1 unless every tool produced a row")
    p.add_argument("--out", default=None, help="report path (default benches/RESULTS.md; work/RESULTS-smoke.md with --smoke)")
    p.add_argument("--note", default="", help="a sentence for the report (e.g. the machine was shared)")
    p.add_argument("--report-only", default=None, metavar="STATE_JSON",
                   help="re-render the report from a saved work/results.json without measuring")
    p.add_argument("--merge", action="append", default=[], metavar="STATE_JSON",
                   help="with --report-only: overlay the results of another saved run")
    a = p.parse_args()
    small = a.quick or a.smoke
    a.n = [int(x) for x in (a.n or ("100" if small else "100,1000")).split(",") if x]
    a.heddle_n = [int(x) for x in (a.heddle_n if a.heddle_n is not None else ("" if small else "10000")).split(",") if x]
    a.shapes = [s for s in a.shapes.split(",") if s]
    a.tools = [t for t in a.tools.split(",") if t]
    a.only = [s for s in a.only.split(",") if s]
    a.reps = a.reps or (1 if a.smoke else 3 if a.quick else 5)
    a.limit = a.limit or (180 if a.smoke else 300)
    a.container_n = a.container_n or (5 if a.smoke else 20)
    a.mem_limit = parse_size(a.mem_limit) if a.mem_limit not in ("0", "") else 0
    a.settle = a.settle if a.settle is not None else (0 if a.smoke else 35)
    a.big_size = a.big_size or ("256M" if a.smoke else "1G")
    a.phases = [x for x in (a.phases or ("plan,full,noop1" if a.smoke else ",".join(PHASES))).split(",") if x]
    a.container_sh = (a.container_sh or ("no" if a.smoke else "yes")) == "yes"
    out = Path(a.out) if a.out else (Path(a.work) / "RESULTS-smoke.md" if a.smoke else Path(a.repo) / "benches" / "RESULTS.md")

    b = Bench(a)
    state_file = b.work / ("results-smoke.json" if a.smoke else "results.json")
    if a.report_only:
        # Re-render the report from the last run's saved state (no measuring).
        st = json.loads(Path(a.report_only).read_text())
        res = st.get("results", st)
        b.results = {k: M(**v) for k, v in res.items()}
        for extra in a.merge:
            # Results measured in a separate invocation replace (or add to) the main run's.
            ex = json.loads(Path(extra).read_text())
            for k, v in ex.get("results", {}).items():
                b.results[k] = M(**v)
            st.setdefault("anomalies", []).extend(
                x + f" (from {Path(extra).name})" for x in ex.get("anomalies", []))
            st.setdefault("merged", []).append(f"{ex.get('meta', {}).get('cmdline', extra)} "
                                               f"({ex.get('meta', {}).get('started', '?')})")
        meta = st.get("meta", {})
        b.anomalies = st.get("anomalies", [f"`{k}`: {fmt(m)}" + (f" — {m.note}" if m.note else "")
                                           for k, m in b.results.items() if m.status in ("error", "limit")])
        b.link_note = st.get("link_note")
        b.saved_versions = meta.get("versions")
        b.container_sh = st.get("container_sh")
        for k in ("n", "heddle_n", "shapes", "tools", "only", "reps", "limit", "long", "jobs", "container_n",
                  "image", "big_cmd", "big_size", "phases", "note"):
            if k in meta:
                setattr(a, k, meta[k])
        cmd = meta.get("cmdline", "?")
        if st.get("merged"):
            cmd += "`, plus results from `" + "`, `".join(st["merged"])
        write_report(b, out, meta.get("started", "?"), meta.get("ended", "?"), meta.get("load0", "?"),
                     meta.get("load1", "?"), cmd, meta.get("elapsed", 0))
        print(f"report: {out}")
        return
    b.runs.mkdir(parents=True, exist_ok=True)
    b.state_file = state_file
    if b.logs.exists():
        shutil.rmtree(b.logs)
    started = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    load0 = " ".join(open("/proc/loadavg").read().split()[:3])
    t0 = time.monotonic()
    cmdline = "bash benches/peers/run.sh" + "".join(
        " " + (x if re.fullmatch(r"[A-Za-z0-9_.,=/-]+", x) else "'" + x.replace("'", "'\\''") + "'")
        for x in sys.argv[1:] if x not in ("--repo", "--work", a.repo, a.work))
    if a.note:
        cmdline = cmdline.replace(" --note '" + a.note.replace("'", "'\\''") + "'", "")
    b.meta = dict(started=started, load0=load0, cmdline=cmdline,
                  **{k: getattr(a, k) for k in ("n", "heddle_n", "shapes", "tools", "only", "reps", "limit", "long",
                                                "jobs", "container_n", "image", "big_cmd", "big_size", "phases", "note")})
    for section, fn in (("shapes", b.shapes), ("large", b.large), ("hash", b.hashing), ("containers", b.containers)):
        if section in a.only:
            b.empty_trash()
            try:
                fn()
            except Exception as e:  # noqa: BLE001  keep going: one broken section must not lose the others
                b.anomalies.append(f"section {section} failed: {e.__class__.__name__}: {e}")
                print(f"!! section {section} failed: {e!r}", flush=True)
    b.empty_trash(settle=False)
    ended = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    load1 = " ".join(open("/proc/loadavg").read().split()[:3])
    elapsed = time.monotonic() - t0
    meta = dict(started=started, ended=ended, load0=load0, load1=load1, cmdline=cmdline, elapsed=elapsed,
                versions=b.versions(),
                **{k: getattr(a, k) for k in ("n", "heddle_n", "shapes", "tools", "only", "reps", "limit", "long",
                                              "jobs", "container_n", "image", "big_cmd", "big_size", "phases", "note")})
    state_file.write_text(json.dumps(dict(
        meta=meta, results={k: v.to_json() for k, v in b.results.items()}, anomalies=b.anomalies,
        link_note=getattr(b, "link_note", None), container_sh=getattr(b, "container_sh", None)), indent=1))
    write_report(b, out, started, ended, load0, load1, cmdline, elapsed)
    print(f"report: {out} ({elapsed / 60:.1f} min)")
    for t in targets(b):
        print(f"target: {t[0]}: {t[1]} -> {t[2]}")

    if a.smoke:
        passed, failed = 0, 0
        checks = []
        if "shapes" in a.only:
            for tool in a.tools:
                for shape in a.shapes:
                    for n in a.n:
                        ms = [b.results.get(f"{tool}/{shape}/{n}/{ph}") for ph in PHASES]
                        ms = [m for m in ms if m is not None]
                        good = bool(ms) and all(m.status in ("ok", "limit", "skipped") for m in ms) and any(m.ok() for m in ms)
                        checks.append((f"{tool} {shape} N={n}", good))
        if "large" in a.only:
            for tool in ("heddle", "dvc"):
                if tool in a.tools:
                    m = b.results.get(f"{tool}/large/full")
                    checks.append((f"{tool} large artefact", bool(m and m.ok())))
        if "hash" in a.only:
            for name in ("heddle", "sha256sum"):
                m = b.results.get(f"{name}/hash/1GiB")
                checks.append((f"{name} hash", bool(m and m.ok())))
        if "containers" in a.only:
            for name in ("heddle", "docker"):
                m = b.results.get(f"{name}/container/run")
                checks.append((f"{name} container", bool(m and m.ok())))
        for name, good in checks:
            print(f"  {'ok  ' if good else 'FAIL'} {name}")
            passed += good
            failed += not good
        print(f"smoke: {passed} passed, {failed} failed")
        sys.exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()
