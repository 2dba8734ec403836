"""World implementations behind `recast.world.World`: `digits` (the embedded default) and `sd3` (paper scale).

Nothing here is imported by `recast.world`; each world is imported on first use of its spec.
"""
