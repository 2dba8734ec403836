"""The GPU check's throughput window, in one process: today's `sd35` shape and the release's recipe as baselines
(same card, first), then each switch alone on the recipe, the best combination on both shapes, and regional compile
last (its compile time reported on its own). Writes throughput_<card>.json after every variant (a run cut short
keeps what it measured) and a table throughput_<card>.md; records the card, the versions and every setting.

    python benchmarks/throughput.py                          # on a GPU (benchmarks/gpu_check.sh runs it)
    python benchmarks/throughput.py --tiny --device cpu      # its CPU twin (tests/test_benchmarks.py)
    python benchmarks/throughput.py --estimate               # the window per section, from FLOPs counted on the
                                                             # meta device (no compute) and assumed rates

Variants are skipped, with the reason recorded, when they would not finish inside ``--budget-s`` (or need CUDA).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_iteration import SHAPES, Switches, _flops_per_item, run, tiny_shape  # noqa: E402
from bench_models import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# assumed sustained rates on an H100/H200 for --estimate, TFLOP/s (benchmarks/README.md says where they come from)
RATES = {"rollout": 300.0, "decode": 100.0, "reward": 200.0, "recast_score": 100.0, "update": 120.0}
# seconds: imports, install and build; per variant (FLOP count, setup); the first compile; a later one (new shapes)
OVERHEAD_S = {"start": 45.0, "variant": 5.0, "compile": 150.0, "recompile": 60.0}


def plan(tiny: bool) -> list[tuple[str, str, dict]]:
    """(label, shape, switches) in run order. "best" is resolved from the variants measured before it."""
    half, small = (1, 2) if tiny else (12, 12)
    singles = [("sdpa=cudnn", dict(sdpa="cudnn")), ("sdpa=flash", dict(sdpa="flash")),
               ("lora_bf16", dict(lora_bf16=True)), ("merged_old", dict(merged_old=True)),
               (f"recompute={half}", dict(recompute=half)),
               (f"micro={small} no recompute", dict(micro=small, recompute=0))]
    return ([("sd35 baseline", "sd35", {}), ("recipe baseline", "recipe", {})]
            + [(f"recipe + {label}", "recipe", sw) for label, sw in singles]
            + [("recipe best", "recipe", "best"), ("sd35 best", "sd35", "best"),
               ("recipe best + compile", "recipe", "best+compile"), ("sd35 best + compile", "sd35", "best+compile")])


def best_switches(results: dict, tiny: bool) -> dict:
    """The switches that beat the recipe baseline (2 % or more, to clear noise); one sdpa kernel and one memory
    choice (micro-batch and recompute), the fastest measured."""
    def rate(label):
        r = results.get(label, {})
        return r.get("images_per_s") or 0.0

    base = rate("recipe baseline")
    if not base:
        return {}
    best = {}
    sdpa = max((("auto", base), *((k, rate(f"recipe + sdpa={k}")) for k in ("cudnn", "flash"))), key=lambda t: t[1])
    if sdpa[0] != "auto" and sdpa[1] > 1.02 * base:
        best["sdpa"] = sdpa[0]
    for sw in ("lora_bf16", "merged_old"):
        if rate(f"recipe + {sw}") > 1.02 * base:
            best[sw] = True
    shape = tiny_shape(SHAPES["recipe"]) if tiny else SHAPES["recipe"]
    half, small = (1, 2) if tiny else (12, 12)
    memory = [((shape.micro, half), rate(f"recipe + recompute={half}")),
              ((small, 0), rate(f"recipe + micro={small} no recompute"))]
    (micro, recompute), r = max(memory, key=lambda t: t[1])
    if r > 1.02 * base:
        best.update(micro=micro, recompute=recompute)
    return best


def environment(device: str) -> dict:
    """The card, the versions and the process settings a result depends on."""
    from importlib.metadata import PackageNotFoundError, version

    from recast.trainer.speed import recompile_limit

    def ver(p):
        try:
            return version(p)
        except PackageNotFoundError:
            return None

    env = {"python": platform.python_version(), "platform": platform.platform(), "device": device,
           "versions": {p: ver(p) for p in ("torch", "diffusers", "transformers", "peft", "accelerate", "numpy")},
           "torch_threads": torch.get_num_threads(), "recompile_limit_default": recompile_limit(),
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "argv": sys.argv}
    try:
        env["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["commit"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_memory_gib=props.total_memory / 2**30, sm_count=props.multi_processor_count,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   sdpa_enabled={k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")() for k in
                                 ("flash", "mem_efficient", "math", "cudnn")})
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["nvidia_smi"] = None
    return env


def _slug(env: dict, tiny: bool) -> str:
    name = env.get("gpu") or ("cpu_tiny" if tiny else "cpu")
    return re.sub(r"[^A-Za-z0-9]+", "_", name.replace("NVIDIA", "")).strip("_")


def summary(results: dict, gpu: bool) -> dict:
    """The issue's targets, read off the measured variants (None where a variant is missing, and on a CPU, where
    the rates say nothing about a GPU)."""
    def get(label, *keys):
        v = results.get(label, {})
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    best_sd35 = max((get(lab, "images_per_s") or 0 for lab in ("sd35 best", "sd35 best + compile")), default=0)
    base_sd35 = get("sd35 baseline", "images_per_s")
    best_recipe = max(("recipe best", "recipe best + compile"), key=lambda lab: get(lab, "images_per_s") or 0)
    out = {"sd35_baseline_images_per_s": base_sd35, "sd35_best_images_per_s": best_sd35 or None,
           "sd35_speedup": best_sd35 / base_sd35 if base_sd35 and best_sd35 else None,
           "recipe_baseline_images_per_s": get("recipe baseline", "images_per_s"),
           "recipe_best_variant": best_recipe, "recipe_best_images_per_s": get(best_recipe, "images_per_s"),
           "recipe_best_update_mfu": get(best_recipe, "mfu", "update"),
           "recipe_best_update_hfu": get(best_recipe, "hfu", "update"),
           "recipe_recast_share": get("recipe baseline", "recast_signal_share")}
    if not gpu:
        out["targets"] = {k: None for k in ("update_mfu_at_least_35pct", "sd35_speedup_at_least_2x",
                                             "recast_share_at_most_1pct")}
        return out
    out["targets"] = {
        "update_mfu_at_least_35pct": None if out["recipe_best_update_mfu"] is None else
        out["recipe_best_update_mfu"] >= 0.35,
        "sd35_speedup_at_least_2x": None if out["sd35_speedup"] is None else out["sd35_speedup"] >= 2,
        "recast_share_at_most_1pct": None if out["recipe_recast_share"] is None else out["recipe_recast_share"] <= 0.01}
    return out


def table(doc: dict) -> str:
    """A markdown table of the variants (images/s per phase, MFU/HFU of the update, shares, compile, memory)."""
    rows = ["| variant | iteration img/s | rollout | decode | reward | recast | update img/s | update MFU | update HFU "
            "| ReCAST share | first-call excess s | peak GiB | wall s |", "|" + " --- |" * 13]
    for label, r in doc["variants"].items():
        if "phases" not in r:
            rows.append(f"| {label} | {r.get('error') or r.get('skipped')} |" + " |" * 11)
            continue
        ph = {k: v.get("images_per_s") for k, v in r["phases"].items()}

        def f(x, fmt="{:.3g}"):
            return "" if x is None else fmt.format(x)

        rows.append(f"| {label} | {f(r['images_per_s'])} | {f(ph['rollout'])} | {f(ph['decode'])} | {f(ph['reward'])} "
                    f"| {f(r['phases']['recast']['seconds'] + r['phases']['recast_score']['seconds'], '{:.3g} s')} "
                    f"| {f(ph['update'])} | {f((r.get('mfu') or {}).get('update'), '{:.1%}')} "
                    f"| {f((r.get('hfu') or {}).get('update'), '{:.1%}')} | {f(r['recast_share'], '{:.2%}')} "
                    f"| {f(r['first_call_excess_s'], '{:.1f}')} | {f(r.get('peak_memory_gib'), '{:.1f}')} "
                    f"| {f(r['wall_s'], '{:.1f}')} |")
    s = doc["summary"]
    return "\n".join([f"# Throughput on {doc['env'].get('gpu') or doc['env']['device']}", "",
                      f"window {doc['window_s']:.0f} s; targets: {json.dumps(s['targets'])}", ""] + rows) + "\n"


def _compile_overhead(label: str, before) -> float:
    """The compile time a variant is priced at: the first compiled variant compiles, a later one recompiles."""
    if "compile" not in label:
        return 0.0
    return OVERHEAD_S["recompile" if any("compile" in b for b in before) else "compile"]


def estimate(tiny: bool, sample: int) -> dict:
    """Seconds per section on an H100/H200 from FLOPs counted on the meta device and the assumed `RATES`."""
    m = build(tiny, "meta", archs=("H14", "L14"))
    cache, sections, total = {}, {}, OVERHEAD_S["start"]
    for label, name, sw in plan(tiny):
        shape = tiny_shape(SHAPES[name]) if tiny else SHAPES[name]
        sw = {} if isinstance(sw, str) else sw  # "best" is not known before the run: price it as a baseline
        micro = sw.get("micro") or shape.micro
        rec = sw.get("recompute", shape.recompute)
        rec = len(m.transformer.transformer_blocks) if rec < 0 else rec
        if (shape.name, rec) not in cache:
            cache[shape.name, rec] = _flops_per_item(m, shape, rec)
        fl = cache[shape.name, rec]
        unit = {"rollout": (shape.rollout_batch * fl["fwd"], shape.images // shape.rollout_batch * shape.steps),
                "decode": (shape.decode_batch * fl["decode"], shape.images // shape.decode_batch),
                "reward": (shape.decode_batch * fl["reward"], shape.images // shape.decode_batch),
                "recast_score": (shape.decode_batch * fl["proxy"],
                                 -(-shape.proxies * shape.trained // shape.decode_batch)),
                "update": (micro * fl["update_hw"], shape.images * shape.trained // micro)}
        secs = sum((1 + min(sample, n)) * f / (RATES[p] * 1e12) for p, (f, n) in unit.items() if n)
        secs += OVERHEAD_S["variant"] + _compile_overhead(label, sections)
        sections[label] = secs
        total += secs
    return {"sections_s": sections, "total_s": total, "rates_tflops": RATES, "overhead_s": OVERHEAD_S}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny models and shapes (the CPU twin)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sample", type=int, default=3, help="timed units per phase after the warm-up")
    ap.add_argument("--budget-s", type=float, default=400.0, help="no variant starts that would end after this")
    ap.add_argument("--compile-backend", default=None, help="default: inductor on CUDA, eager elsewhere")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu"))
    ap.add_argument("--estimate", action="store_true", help="print the window per section and exit (no compute)")
    a = ap.parse_args(argv)
    if a.estimate:
        est = estimate(a.tiny, a.sample)
        print(json.dumps(est, indent=1))
        return est
    t0 = time.perf_counter()
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("throughput: --device cuda but no CUDA GPU is visible; use --tiny --device cpu for the twin")
    env = environment(a.device)
    shapes = {n: tiny_shape(s) if a.tiny else s for n, s in SHAPES.items()}
    m = build(a.tiny, a.device, archs=("H14", "L14"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"throughput_{_slug(env, a.tiny)}.json"
    doc = {"env": env, "settings": {"sample": a.sample, "budget_s": a.budget_s, "tiny": a.tiny,
                                    "shapes": {n: asdict(s) for n, s in shapes.items()}},
           "build_s": time.perf_counter() - t0, "variants": {}}
    flop_cache, walls = {}, {}
    for label, name, sw in plan(a.tiny):
        if isinstance(sw, str):
            sw = {**best_switches(doc["variants"], a.tiny), **({"compile": True} if "compile" in sw else {})}
        sw = Switches(**sw)
        elapsed = time.perf_counter() - t0
        need = walls.get(name, 0.0) * 1.2 + (_compile_overhead(label, doc["variants"]) if not a.tiny else 0.0)
        if sw.sdpa in ("cudnn", "flash") and not cuda:
            doc["variants"][label] = {"switches": asdict(sw), "skipped": "needs CUDA"}
        elif elapsed + need > a.budget_s:
            why = f"budget ({elapsed:.0f} s of {a.budget_s:.0f})"
            doc["variants"][label] = {"switches": asdict(sw), "skipped": why}
        else:
            backend = a.compile_backend or ("inductor" if cuda else "eager")
            try:
                r = run(m, shapes[name], sw, a.sample, backend, flop_cache)
            except Exception as err:  # a kernel a card refuses (say) costs its variant, not the window
                m.optimizer.zero_grad(set_to_none=True)
                r = {"switches": asdict(sw), "error": f"{type(err).__name__}: {str(err)[:300]}"}
            doc["variants"][label] = r
            if "wall_s" in r and not sw.compile:
                walls[name] = max(walls.get(name, 0.0), r["wall_s"])
            print(f"{label}: " + (r.get("error") or f"{r['images_per_s']:.3g} images/s, wall {r['wall_s']:.1f} s"),
                  flush=True)
        doc["window_s"] = time.perf_counter() - t0
        doc["summary"] = summary(doc["variants"], cuda)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        path.with_suffix(".md").write_text(table(doc))
    print(json.dumps(doc["summary"], indent=1))
    return doc


if __name__ == "__main__":
    main()
