"""SD3 / SD3.5 at paper scale: a diffusers `StableDiffusion3Pipeline` behind `recast.world.World`.

    world = recast.world.load_world("sd3:/models/sd3.5-medium")   # or "sd3-tiny" for a random tiny pipeline
    policy = recast.trainer.policy.Policy(world.transformer, lora_rank=32, lora_alpha=64.0)  # + old policy, EMA

Submodules: `world` (loading, text cache, VAE, CFG), `lora` (a trained adapter in diffusers' format),
`tiny` (the offline test pipeline), `prompts` (prompt files, GenEval metadata), `rewards` (reward models),
`vlm_judge` (pairwise LLM-as-a-judge).
"""

from recast.worlds.sd3.settings import SD3Settings
from recast.worlds.sd3.world import SD3World, load_sd3_world

__all__ = ["SD3Settings", "SD3World", "load_sd3_world"]
