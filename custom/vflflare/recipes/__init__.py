"""NVFlare 2.9 recipes for vflflare jobs (see nvflare.recipe): build, export or execute a job."""

from vflflare.recipes.vfl import PSIRecipe, VFLRecipe

__all__ = ["PSIRecipe", "VFLRecipe"]
