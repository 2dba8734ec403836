"""Training configuration: one frozen dataclass and named presets.

`preset("ci" | "cpu" | "gpu" | "sd35")` returns a complete `TrainConfig`; override fields with `dataclasses.replace`.
Every run writes its config (`config.json`) next to its outputs, and `TrainConfig.from_dict` reads it back.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path

from recast.bounded import load_yaml, short_repr
from recast.credit.methods import AGGREGATIONS, KERNELS, METHODS  # the credit methods, by name
BACKENDS = ("nft", "grpo")
STD_SCOPES = ("global", "group")
NFT_NORMS = ("velocity", "x0", "none")  # adaptive normalisation of the NFT loss (docs/method.md §4)
SDE_TYPES = ("cps", "flow_grpo")  # grpo rollout step (docs/method.md §4)
REPLAY_PRIORITIES = ("recency", "advantage", "informativeness")  # how replay draws (recast.trainer.replay)


@dataclass(frozen=True)
class TrainConfig:
    """Everything one online RL run needs; see docs/method.md §2 for the symbols."""

    # --- world and task ---
    world: str = "tiny"  # world spec (recast.world): "tiny", "digits:PATH", "sd3:PATH_OR_HUB_ID", "sd3-tiny", or a
    #                      bare folder holding world.json (the digit world), e.g. "data/digit_base"
    world_settings: dict = dataclasses.field(default_factory=dict)  # the world's own settings over its defaults for
    #                      the setting (SD3: resolution, prompt_files, judges, reward_root, dtype, ...; the digit
    #                      world has none); checked by the world before anything loads (recast.world.world_settings)
    setting: str = "compose"  # the world's reward setting: compose | quality (digits), composition | quality (sd3)
    rewards: tuple[str, ...] = ()  # explicit reward names (overrides `setting` when non-empty)
    lam: tuple[float, ...] = ()  # budgets lambda_k >= 0, one per reward, normalised to sum 1; () = the setting's
    #                              default budgets (`resolve_budgets`: equal unless the world sets them)
    method: str = "recast"  # recast (the paper's: W from a weight table built offline) | static (its baseline,
    #                         W = lam/T) | recast_live (our first reading: W estimated live) | uniform | reward_sum |
    #                         fixed | per_step | otca (recast.credit.METHODS; docs/method.md "Methods")
    aggregation: str = "auto"  # how raw rewards become the signal: auto (the method's own) | pre (the paper's: mixed
    #                            by T*W, normalised per step in each prompt group) | loss | per_reward (ours)
    weight_file: str = "auto"  # method recast: the density-ratio profile (solved for lam at the start) or weight
    #                            table (its lam must be the run's) W comes from; auto = the world's committed profile
    kernel: str = "auto"  # the live W's kernel (recast_live): auto (power) | exp (the paper's) | power (ours)
    fixed_W: tuple[tuple[float, ...], ...] = ()  # (K, T) W for method="fixed": rows sum to lam, columns to sum(lam)/T
    step_credit_eps: float = 1e-3  # per_step / otca: added to each step's clipped similarity gain before normalising
    otca_explore: float = 0.5  # otca: weight of the budgets lam mixed into each sample's min-norm reward coefficients
    backend: str = "nft"  # nft (DiffusionNFT forward-process loss) | grpo (Flow-GRPO PPO-clip on SDE log-probs)

    # --- rollouts ---
    iterations: int = 100  # online iterations (one rollout batch + one optimiser step each)
    prompts_per_iter: int = 4  # distinct train prompts per iteration (per process)
    group_size: int = 4  # G: samples per prompt; advantages are normalised within each group
    batch_size: int = 0  # samples per iteration per process (a multiple of G); 0 = prompts_per_iter * G
    num_steps: int = 10  # T: sampler steps = columns of W
    shift: float = 3.0  # sigma-schedule shift (diffusers FlowMatchEulerDiscreteScheduler)
    noise_level: float = 0.7  # Flow-GRPO SDE noise level a (sde_type="flow_grpo"): std_t = a sqrt(sigma / (1 - sigma))
    sde_type: str = "cps"  # grpo rollouts: cps (coefficients-preserving, right noise level at any T) | flow_grpo
    cps_noise_level: float = 0.3  # a of the cps step, std = sigma_next sin(a pi / 2); on the base model at T = 6,
    # 0.3 scores like ODE samples on every reward (|z| <= 1.8, 128 samples), 0.7 moves "clean" by 7.6 s.e.

    # --- advantages ---
    adv_clip_max: float = 5.0  # c: advantages clipped to [-c, c]; p = 0.5 + A / (2c)
    std_scope: str = "global"  # "global": std over the whole batch (DiffusionNFT) | "group": within each group
    reward_std_floor: float = 1e-2  # a reward whose batch std < this x its range (1 for [0, 1] rewards) gets p = 0.5

    # --- NFT loss ---
    nft_beta: float = 1.0  # NFT strength in v+ = (1-beta) v_old + beta v_theta (not the KL weight)
    nft_norm: str = "velocity"  # adaptive normalisation: velocity (every column weighs the same) | x0 (DiffusionNFT's
    # sigma-weighted form, for parity) | none (plain squared error); see docs/method.md §4
    nft_loss_scale: bool = True  # divide by nft_beta and multiply by adv_clip_max as DiffusionNFT does
    kl_beta: float = 0.0  # weight of the KL term kl_beta * ||v_theta - v_ref||^2 to the frozen base (grpo: Gaussian KL)
    train_columns: int = 0  # m: columns trained per sample, drawn at random from the eligible ones; 0 = all eligible
    skip_last_column: bool = False  # nft: never train column T-1 (grpo never trains its deterministic last step)

    # --- GRPO loss ---
    clip_range: float = 1e-4  # PPO ratio clip epsilon (Flow-GRPO default)

    # --- old policy and EMA ---
    old_decay_rate: float = 0.001  # old-policy decay d = min(old_decay_rate * step, old_decay_max)
    old_decay_max: float = 0.5  # cap of the old-policy decay d
    ema_decay: float = 0.9  # EMA of the trained parameters, used for evaluation and sample grids

    # --- ReCAST ---
    recast_every: int = 1  # re-solve W every this many iterations
    temperature: float = 1.0  # Sinkhorn kernel temperature tau (inf -> static lambda/T)
    floor: float = 1e-6  # kernel floor added to the step profile q
    uniform_mix: float = 0.0  # gamma: W <- (1-gamma) W + gamma lambda/T
    alpha: float = 2.0  # Renyi order of the discriminability
    tracker_ema: float = 0.0  # EMA of D across re-solves (0: the pooled window below already averages iterations)
    informativeness_subset: int = 4096  # samples per iteration whose x0_hat is scored (tweedie); capped at B = all
    tracker_window: int = 16  # iterations of (p_clean, proxy) pairs pooled for each tweedie estimate of D
    tracker_min_pairs: int = 96  # W stays lambda/T until every trained column has this many pooled pairs (cpu: 6 its)
    tracker_bootstrap: int = 64  # bootstrap replicates for the noise share of the gains (0: no shrinkage)

    # --- trajectory replay (nft only; recast.trainer.replay) ---
    replay_share: float = 0.0  # replayed samples per fresh sample in each iteration's training batch (0 = off; 1 =
    #                            as many replayed as fresh); they cost no reward queries (raw rewards are stored)
    replay_priority: str = "advantage"  # recency (1 / age) | advantage (sum_k lam_k |A_k|) | informativeness
    #                                     (|A_k| weighted by lam_k x the reward's D gain over the trained columns;
    #                                     method="recast_live" only)
    replay_capacity: int = 256  # samples the buffer holds; the oldest go first when it is full
    replay_max_age: int = 8  # a sample is replayed at most this many iterations after it was drawn, then dropped

    # --- optimisation ---
    lora_rank: int = 8  # LoRA rank on the attention projections; 0 = full fine-tuning
    lora_alpha: float = 16.0  # LoRA alpha (scale alpha / rank)
    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 1e-4  # AdamW weight decay
    adam_betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    adam_eps: float = 1e-8  # AdamW epsilon
    grad_clip: float = 1.0  # max global grad norm (0 = off)
    grad_accum: int = 1  # micro-batches per optimiser step (the iteration's training examples are split evenly)

    # --- throughput (recast.trainer.speed; each off until a GPU measurement says it is faster) ---
    sdpa_backend: str = "auto"  # attention kernel: auto (PyTorch picks) | flash | efficient | cudnn | math
    lora_merge_rollouts: bool = False  # merge the old policy's LoRA into the base weights for no-grad rollouts
    compile_blocks: bool = False  # regional torch.compile of each transformer block
    # (issue 62) the switches below are applied by recast.trainer.speed.apply_switches, each off until measured
    lora_merged_old: bool = False  # old-policy passes (rollouts, v_old) on a standing merged copy of the weights
    lora_bf16: bool = False  # LoRA matmuls take their bf16 input as is (no fp32 copies); needs bf16/fp16 autocast
    recompute_blocks: int = -1  # recompute activations of the first n blocks only in backward; -1 = world's setting

    # --- several processes (docs/paper-scale.md, "From one process to N nodes") ---
    fsdp: bool = False  # shard the transformer over the processes with torch's FSDP2, one unit per block (weights,
    #                     gradients, optimiser state, old policy and EMA: 1/N each); needs several processes and
    #                     train_columns=0 (each pass is a collective, so every process must run the same ones)

    # --- stages (the paper trains in two: docs/paper-scale.md) ---
    initialize_from: str = ""  # a finished run directory whose last checkpoint starts this run (a new stage): its
    #                            LoRA, optimiser, old policy, EMA and update count are kept; this run's iterations,
    #                            rewards, budgets and seed start afresh ("" = from the base model)

    # --- run ---
    seed: int = 0  # seeds the world (tiny), LoRA init, prompt draws, noise, column draws
    num_threads: int = 1  # torch CPU threads for this process; 0 = torch's default (every core). One by default: on a
    #                       shared or busy machine torch's default oversubscribes the cores and an iteration ran 40-60x
    #                       slower (issue 61); raise it on a quiet machine with --set num_threads=N
    device: str = "cpu"  # "cpu" or "cuda"; under `accelerate launch` the process's device is used
    mixed_precision: str = "auto"  # auto (follow `accelerate config` / ACCELERATE_MIXED_PRECISION; else no) | no |
    #                                fp16 | bf16 (an explicit value wins over accelerate's)
    eval_every: int = 0  # judge EMA samples on test prompts every this many iterations (0 = only at the end)
    eval_prompts: int = 16  # number of test prompts for evaluation
    eval_group: int = 1  # samples per test prompt at evaluation
    checkpoint_every: int = 0  # write a checkpoint every this many iterations (0 = only at the end)
    checkpoint_minutes: float = 10.0  # and after an iteration that ends this long after the last checkpoint (0: off),
    #                                   so a kill (SIGKILL, a lost node) loses at most about this much training
    grid_every: int = 0  # write a PNG grid of EMA samples every this many iterations (0 = only at the end)
    log_with: tuple[str, ...] = ()  # accelerate trackers, e.g. ("tensorboard",) or ("wandb",)
    progress: bool = True  # show a tqdm progress bar

    @property
    def sde_noise_level(self) -> float:
        """The noise level of the grpo rollout step in use (`cps_noise_level` or `noise_level`)."""
        return self.cps_noise_level if self.sde_type == "cps" else self.noise_level

    @property
    def B(self) -> int:
        """Samples per iteration per process."""
        return self.batch_size or self.prompts_per_iter * self.group_size

    def to_dict(self) -> dict:
        """JSON-ready dict (tuples become lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """Inverse of `to_dict`; unknown keys raise ValueError naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; valid fields: {sorted(names)}")
        return cls(**{k: _tuplify(v) for k, v in d.items()})

    def replace(self, **kw) -> "TrainConfig":
        """`dataclasses.replace` shorthand."""
        return dataclasses.replace(self, **kw)


def _tuplify(v):
    """Lists (from JSON) back to tuples, recursively."""
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


# The paper's recipe (docs/method.md §0) at the digit world's sizes: the release's choices (the "pre" aggregation of
# raw rewards through a W built once, offline, from the world's committed density-ratio profile; DiffusionNFT's
# x0-space loss; the Euler sampler; every step but one trained per sample; no EMA (the trained weights are evaluated);
# the old adapter's warm-up decay d = 0.5 min(updates / 500, 1); one optimiser update per iteration; per-group std),
# with the world's grid (6 Euler steps, shift 3), batch (4 prompts x 8 samples, 30 iterations) and the optimiser and KL
# weight tuned for it on the uniform baseline (the comment of the "reading" preset says how). nft_beta stays 1: the
# release's 0.1 was set for SD3.5-Medium's LoRA and has not been tried here.
_PAPER_CPU = dict(world="data/digit_base", iterations=30, prompts_per_iter=4, group_size=8, num_steps=6,
                  train_columns=5, lora_rank=8, lora_alpha=16.0, lr=1e-3, eval_prompts=64, eval_every=15, kl_beta=1.0,
                  method="recast", nft_norm="x0", ema_decay=0.0, num_threads=1, checkpoint_every=5)

_PRESETS = {
    # seconds: a random tiny world, 2 prompts x 2 samples, 4 steps, on any world. Its method is the paper's static
    # baseline, which needs no weight table; --method recast on the "tiny" world reads its committed smoke profile
    # (data/profiles/tiny_renderings_T4.npz: a valid W for its rewards and grid, whose timing means nothing)
    "ci": dict(world="tiny", iterations=4, prompts_per_iter=2, group_size=2, num_steps=4, informativeness_subset=4,
               lora_rank=4, lora_alpha=8.0, eval_prompts=4, progress=False, tracker_min_pairs=2,
               tracker_bootstrap=16, num_threads=1, method="static"),
    # the paper's recipe on 2 CPU cores in minutes (above); "cpu" is its everyday name
    "paper": _PAPER_CPU,
    "cpu": _PAPER_CPU,
    # our first reading of the abstract at CPU size: the recipe of the study's stage A (research/study/), kept so its
    # runs re-derive; its method is recast_live (W estimated live, rewards normalised one by one)
    # (groups of 8 and lr 1e-3: with 4 x 4 samples and lr 3e-3 Adam turned mostly-noise gradients into full-size
    # steps and both methods drifted below the base model; tuned on the uniform baseline only)
    # kl_beta: 1, raised per reward setting where the uniform baseline (3 seeds) fails at 1 (`_SETTING_DEFAULTS`).
    # Pass = the training rewards rise while no held-out judge falls by more than a seed-std. Compose passes at 1
    # (and at 0 with the old rewards) on the 64-sample evaluations; re-scored on 256 samples its old rewards fail on
    # blur at every weight of {1, 3, 10} (research/tables/kl_tuning_compose_reeval256.csv), hence the redesigns.
    # Quality, judged on 256 and 1,024 samples per policy (research/tables/kl_tuning_quality_reeval{256,1024}.csv):
    # 1 fails (1,024 samples: colour -0.052 +- 0.052, size -0.032 +- 0.023), 2 passes (blur +0.030 +- 0.050, every
    # other judge up), 3, 10 and 30 fail on the blur defect (+0.053 +- 0.035 at 3): 2 is the smallest passing weight
    # of {1, 2, 3, 10, 30}. On the 64-sample evaluations 1 failed on colour and 3 passed, which set 3 until the
    # measurement was sharpened. One weight for both settings would be 10 (compose at 3: blur defect +0.031 +-
    # 0.016), which learns a third as much (research/rounds/23-kl-tuning.md, research/tables/kl_tuning_*).
    # ema_decay: 0.9, and 0 in compose, whose uniform baseline fails at 0.9 on the blur defect (+0.029 +- 0.024 at
    # 256 samples) and passes at 0 (-0.009 +- 0.010; +0.010 +- 0.010 on 1,024 samples, a narrow pass): at 30
    # iterations the EMA policy is blurrier than the weights
    # (research/probes/compose_variants.py, research/probes/ema_blur_probe.py). In quality the EMA and the raw weights
    # blur alike (at kl_beta 3: +0.055 and +0.059), so quality keeps 0.9. Quality's default budgets became
    # sharpness-heavy after this tuning (recast.worlds.digits.rewards.BUDGETS); with them 1 still fails (16 fresh draws
    # pooled: colour -0.068 +- 0.058, strict -0.011 +- 0.003), so 2 stays. Tuned on uniform only. A reward list
    # (`rewards=`) or another setting gets the preset's values; an explicit field always wins.
    "reading": dict(world="data/digit_base", iterations=30, prompts_per_iter=4, group_size=8, num_steps=6,
                    train_columns=3, lora_rank=8, lora_alpha=16.0, lr=1e-3, eval_prompts=64, eval_every=15,
                    kl_beta=1.0, method="recast_live"),
    # one GPU, a larger digit-world run of the paper's recipe (its 10-step grid has its own committed profile)
    "gpu": dict(world="data/digit_base", device="cuda", iterations=400, prompts_per_iter=16, group_size=8,
                num_steps=10, train_columns=9, lora_rank=32, lora_alpha=64.0, lr=3e-4, kl_beta=1.0, method="recast",
                nft_norm="x0", ema_decay=0.0, eval_prompts=256, eval_every=50, checkpoint_every=50, grid_every=50),
    # SD3.5-Medium (docs/paper-scale.md; configs/paper/ hold the paper's own experiments); never run on these
    # machines. Per process: 6 prompts x 24 samples, so 8 GPUs draw 48 prompts x 24 images per iteration, in
    # micro-batches (16 accumulation steps); the release's 25 Euler steps, 24 trained per sample; LoRA r32 / alpha 64,
    # AdamW 3e-4, bf16, nft_beta 0.1, kl_beta 1e-4, x0-space loss, no EMA. method recast needs a weight_file (a
    # profile made with `recast profile --proposal DIR` on this grid). Point --world at a local pipeline folder.
    "sd35": dict(world="sd3:stabilityai/stable-diffusion-3.5-medium", setting="composition", device="cuda",
                 mixed_precision="bf16", iterations=300, prompts_per_iter=6, group_size=24, num_steps=25,
                 train_columns=24, informativeness_subset=32, grad_accum=16, lora_rank=32, lora_alpha=64.0, lr=3e-4,
                 nft_beta=0.1, kl_beta=1e-4, nft_norm="x0", ema_decay=0.0, std_scope="group", method="recast",
                 weight_file="", eval_prompts=64, eval_every=25, checkpoint_every=25, grid_every=25),
}


REPO_ROOT = Path(__file__).resolve().parents[1]
# The embedded world's weights, judges and prompts, in one root: $RECAST_DATA_ROOT if set; in an installed wheel the
# copy of data/ it ships as package data (recast/_data, setup.py); in a clone or an editable install, data/.
_PACKAGED = Path(__file__).resolve().parent / "_data"
DATA_ROOT = (Path(os.environ["RECAST_DATA_ROOT"]) if os.environ.get("RECAST_DATA_ROOT")
             else _PACKAGED if (_PACKAGED / "digit_base").is_dir() else REPO_ROOT / "data")
# "data/..." in a config (the presets' "data/digit_base") is looked up from the cwd, then under the data root
_DATA_PREFIX = "data/"


def _roots(path: str) -> list[Path]:
    """Where a relative path missing from the cwd is looked for: the repo root, and for "data/..." the data root.
    With $RECAST_DATA_ROOT set, "data/..." is looked for there only: the base model then comes from the same root as
    the rewards and judges, never from the clone's data/ behind the user's back."""
    if path.startswith(_DATA_PREFIX) and os.environ.get("RECAST_DATA_ROOT"):
        return [DATA_ROOT / path[len(_DATA_PREFIX):]]
    out = [REPO_ROOT / path]
    if path.startswith(_DATA_PREFIX):
        out.append(DATA_ROOT / path[len(_DATA_PREFIX):])
    return out


def resolve_path(path: str | os.PathLike) -> Path:
    """A file named relative to the repo (e.g. "data/profiles/...") found from the cwd, else from the repo root and,
    for "data/...", the data root; returned unchanged when it is nowhere (the caller names the missing file)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    for root in _roots(str(path)):
        if root.exists():
            return root
    return p


def resolve_world(world: str) -> str:
    """The `recast.world` spec of a config's `world` value (no world is loaded).

    A registered spec ("tiny", "digits:PATH", "sd3:PATH", "sd3-tiny", ...) is kept, a relative digits:PATH missing
    from the cwd is tried from the repo root, and a bare folder holding world.json (tried from the cwd, then the
    repo root), such as the presets' "data/digit_base", means the digit world: "digits:FOLDER".

    Raises:
        FileNotFoundError: a bare value that is neither a registered spec nor a saved digit world.
    """
    from recast.world import world_prefixes

    prefix, sep, arg = world.partition(":")
    if prefix in world_prefixes() or (sep and not Path(world).exists()) or not world.strip():
        if prefix == "digits" and arg and not Path(arg).exists():
            for root in _roots(arg):
                if root.exists():
                    return f"digits:{root}"
        return world  # recast.world.parse_spec names the valid prefixes if this one is unknown
    for p in (Path(world), *_roots(world)):
        if (p / "world.json").is_file():
            return f"digits:{p}"
    where = f" under RECAST_DATA_ROOT={DATA_ROOT}" if world.startswith(_DATA_PREFIX) and os.environ.get(
        "RECAST_DATA_ROOT") else ""
    raise FileNotFoundError(f"no digit world at {short_repr(world)}{where} (world.json missing) and not a world spec "
                            f"(prefixes: {', '.join(world_prefixes())}): use world='tiny', or make the base model "
                            "with `python -m recast.worlds.digits.pretrain --out data/digit_base`")


# fields by reward setting, for presets tuned per setting on the uniform baseline (see the comment above the cpu
# preset): kl_beta 2 in quality; in compose the raw trained weights are evaluated (ema_decay 0), because at 30
# iterations the EMA of the LoRA weights blurs (research/rounds/23-kl-tuning.md)
_SETTING_DEFAULTS: dict[str, dict[str, dict[str, float]]] = {
    "reading": {"quality": {"kl_beta": 2.0}, "compose": {"ema_decay": 0.0}},
    "paper": {"quality": {"kl_beta": 2.0}},
    "cpu": {"quality": {"kl_beta": 2.0}},
    "gpu": {"quality": {"kl_beta": 2.0}},  # follows the cpu preset's tuning; not tuned at the gpu preset's scale
}


def preset(name: str, **overrides) -> TrainConfig:
    """A complete, frozen config by name.

    Args:
        name: "ci" (seconds, tiny random world), "paper" or its everyday name "cpu" (the paper's recipe, minutes on
            2 cores with the base model), "reading" (our first reading's recipe, the study's stage A), "gpu" (one
            GPU), "sd35" (SD3.5-Medium at the release's scale, 8 GPUs).
        **overrides: field overrides applied with `dataclasses.replace`. Without ``rewards``, a preset tuned per
            setting takes the setting's values of the fields not overridden (`_SETTING_DEFAULTS`: cpu and gpu use
            ``kl_beta`` 2 for quality, the preset's 1 otherwise; cpu uses ``ema_decay`` 0 for compose).

    Raises:
        ValueError: unknown preset name.
    """
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {short_repr(name)}; choose one of {sorted(_PRESETS)}")
    base = TrainConfig(**_PRESETS[name])
    setting = overrides.get("setting", base.setting)
    if not overrides.get("rewards", base.rewards):
        overrides = {**_SETTING_DEFAULTS.get(name, {}).get(setting, {}), **overrides}
    return dataclasses.replace(base, **overrides)


def resolve_rewards(cfg: TrainConfig, spec: str | None = None, *, info=None) -> tuple[str, ...]:
    """Reward names of a config: `cfg.rewards` or the world's setting, checked against the world's static
    description (`recast.world.world_info`: no weights are loaded).

    Args:
        cfg: the config.
        spec: the world spec if already resolved (`resolve_world(cfg.world)`).
        info: the world's `recast.world.WorldInfo` if already read.

    Raises:
        ValueError: unknown setting or reward (naming the valid ones), or a bad world spec.
        FileNotFoundError: the world's path does not exist.
    """
    from recast.world import world_info

    spec = resolve_world(cfg.world) if spec is None else spec
    info = world_info(spec) if info is None else info
    if cfg.rewards:
        names = tuple(cfg.rewards)
    else:
        if cfg.setting not in info.reward_settings:
            raise ValueError(f"unknown setting {short_repr(cfg.setting)} for world {short_repr(spec)}; choose one of "
                             f"{sorted(info.reward_settings)}")
        names = tuple(info.reward_settings[cfg.setting])
    for n in names:
        if n not in info.reward_names:
            raise ValueError(f"unknown reward {short_repr(n)} for world {short_repr(spec)}; valid: "
                             f"{', '.join(info.reward_names)}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:  # the same reward twice would train it twice under colliding metric keys
        raise ValueError(f"rewards {dup} are named more than once in {list(names)}; name each reward once (to weigh "
                         "one more, raise its budget with --lam)")
    return names


def default_budgets(info, setting: str, *, lam=(), rewards=()) -> tuple[float, ...]:
    """The budgets rule, given a world's `recast.world.WorldInfo`: `lam` if given, else () for an explicit reward
    list (it is not a setting), else the setting's default budgets (`WorldInfo.setting_budgets`; the digit world's
    quality setting is sharpness-heavy, `recast.worlds.digits.rewards.BUDGETS`), else () for equal budgets."""
    if lam or rewards:
        return tuple(lam)
    return tuple(info.setting_budgets.get(setting, ()))


def resolve_budgets(cfg: TrainConfig, spec: str | None = None, *, info=None) -> tuple[float, ...]:
    """Budgets of a config before normalisation (`default_budgets` for its `lam`, `rewards` and `setting`). Reads
    the world's static description only, and only when the setting's defaults are needed (or pass `info`)."""
    from recast.world import world_info

    if cfg.lam or cfg.rewards:
        return tuple(cfg.lam)
    if info is None:
        info = world_info(resolve_world(cfg.world) if spec is None else spec)
    return default_budgets(info, cfg.setting)


def load_fixed_W(path: str | os.PathLike) -> tuple[tuple[tuple[float, ...], ...], tuple[str, ...] | None]:
    """The W of a JSON file, for ``method="fixed"``: ``profile.json`` of `python -m recast profile` or
    ``mean_W.json`` of ``research/probes/fixed_w_runs.py`` (any object with a ``"W"`` list of rows).

    Returns:
        (W as nested tuples, the file's ``reward_names`` or None where it has none). The marginals are checked
        against the run's budgets by the trainer's validation (`recast.advantages.validate_W`).

    Raises:
        FileNotFoundError: no such file. ValueError: not JSON, no ``"W"``, or W not a non-empty matrix of numbers.
    """
    import json

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--fixed-w {path}: no such file (write one with `python -m recast profile --out DIR`)")
    try:
        obj = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"--fixed-w {path}: not a JSON file ({err})") from None
    W = obj.get("W") if isinstance(obj, dict) else None
    if not isinstance(W, list) or not W or not all(isinstance(row, list) and row for row in W):
        raise ValueError(f"--fixed-w {path}: expected an object with a \"W\" matrix (a list of rows), as profile.json "
                         "or mean_W.json hold")
    rows = tuple(parse_floats(row, f"--fixed-w {path}: W") for row in W)
    names = obj.get("reward_names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError(f"--fixed-w {path}: \"reward_names\" must be a list of reward names, got "
                         f"{type(names).__name__} {short_repr(names)}")
    return rows, (tuple(names) if names is not None else None)


# ---------------------------------------------------------------------------------------------------------------------
# Typed parsing and checking of fields: every value a user can give is checked against the field's declared type
# before any compute, and every error names the field.

TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")
INF_OK = ("temperature",)  # float fields where +inf is meaningful (τ = inf gives the static λ/T)


def field_types() -> dict[str, str]:
    """TrainConfig field name -> declared type as written in the class ("int", "tuple[float, ...]", ...)."""
    return {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)}


def parse_bool(text: str, name: str = "value") -> bool:
    """Strict boolean: true/false/1/0/yes/no (any case); anything else raises ValueError naming `name`."""
    word = str(text).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{name}: expected a boolean (true/false/1/0/yes/no), got {short_repr(text)}")


def parse_floats(value, name: str = "value") -> tuple[float, ...]:
    """Numbers from a list/tuple, or from a string "0.4,0.2" or "[0.4, 0.2]" (papermill's -p passes strings).

    Raises:
        ValueError: naming `name` and the offending item.
    """
    if isinstance(value, str):
        items = [x for x in value.strip().strip("[]()").split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"{name}: expected a list of numbers, got {type(value).__name__} {short_repr(value)}")
    out = []
    for x in items:
        if isinstance(x, bool):
            raise ValueError(f"{name}: expected numbers, got {short_repr(x)}")
        try:
            out.append(float(x))
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected comma-separated numbers, got {short_repr(x)} in "
                             f"{short_repr(value)}") from None
    return tuple(out)


def parse_field(name: str, text: str):
    """Parse the string `text` as a value of TrainConfig field `name` (what `--set name=text` means).

    Raises:
        ValueError: unknown field, or a value that does not parse as the field's type (naming both).
    """
    types = field_types()
    if name not in types:
        raise ValueError(f"unknown TrainConfig field {short_repr(name)}; valid fields: {', '.join(sorted(types))}")
    typ = types[name]
    try:
        if typ.startswith("tuple[tuple"):
            return tuple(parse_floats(row, name) for row in text.split(";"))
        if typ.startswith("tuple[float"):
            return parse_floats(text, name)
        if typ.startswith("tuple[str"):  # "a,b", "[a, b]" or "['a', 'b']" (papermill's -p passes the literal)
            return tuple(v.strip().strip("'\"") for v in text.strip().strip("[]()").split(",") if v.strip())
        if typ == "dict":
            value = load_yaml(text, name) if text.strip() else {}
            if not isinstance(value, dict):
                raise ValueError(f"{name}: expected a mapping such as {{resolution: 256}}, got {short_repr(text)}")
            return value
        if typ == "bool":
            return parse_bool(text, name)
        if typ == "int":
            return int(text)
        if typ == "float":
            return float(text)
    except ValueError as err:
        if str(err).startswith(name):
            raise
        raise ValueError(f"{name}: expected {typ}, got {short_repr(text)}") from None
    return text


def parse_overrides(texts) -> dict:
    """``FIELD=VALUE`` strings (what repeated ``--set`` options give) as a dict of parsed TrainConfig values.

    Raises:
        ValueError: an item without ``=``, or what `parse_field` raises for its field and value.
    """
    out = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep:
            raise ValueError(f"expected FIELD=VALUE with a TrainConfig field, got {short_repr(text)}")
        key = key.strip()
        if key.startswith("world_settings."):  # one world setting: its value as YAML, checked by the world later
            sub = key[len("world_settings."):]
            if not sub:
                raise ValueError(f"expected world_settings.NAME=VALUE, got {short_repr(text)}")
            try:
                parsed = load_yaml(value, key) if value.strip() else ""
            except ValueError as err:
                if "not valid YAML" not in str(err):
                    raise  # too large, an alias bomb, a duplicate key: refused; plain text that is not YAML stays text
                parsed = value
            out.setdefault("world_settings", {})[sub] = parsed
            continue
        out[key] = parse_field(key, value)
    return out


def _is_number(v, *, finite: bool) -> bool:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    return math.isfinite(v) or (not finite and v == math.inf)


def _items(v) -> list | None:
    """A sequence's items as a list (tuples, lists, 1-D arrays and tensors), or None for anything else."""
    if isinstance(v, (tuple, list)):
        return list(v)
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        items = v.tolist()
        return items if isinstance(items, list) else None
    return None


def check_field_types(cfg: TrainConfig) -> None:
    """Every field holds a value of its declared type, and every float is finite (τ may be +inf).

    Raises:
        ValueError: naming the first field at fault, its expected type and the value.
    """
    for name, typ in field_types().items():
        v = getattr(cfg, name)
        finite = name not in INF_OK
        if typ == "float":
            ok = _is_number(v, finite=finite)
        elif typ == "int":
            ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        elif typ == "bool":
            ok = isinstance(v, bool)
        elif typ == "str":
            ok = isinstance(v, str)
        elif typ.startswith("tuple[tuple[float"):
            rows = _items(v)
            ok = rows is not None and all(
                _items(r) is not None and all(_is_number(x, finite=True) for x in _items(r)) for r in rows)
        elif typ.startswith("tuple[float"):
            items = _items(v)
            ok = items is not None and all(_is_number(x, finite=True) for x in items)
            if ok and "..." not in typ:
                ok = len(items) == typ.count("float")
        elif typ.startswith("tuple[str"):
            ok = isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v)
        elif typ == "dict":
            ok = isinstance(v, dict) and all(isinstance(k, str) for k in v)
        else:
            continue  # a type this checker does not know: its own validation owns it
        if not ok:
            what = "a finite number" if typ == "float" else typ
            raise ValueError(f"config field {name}: expected {what}, got {short_repr(v)}")
