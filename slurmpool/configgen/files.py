"""The names of the Slurm files ``generate-config`` writes, spelled once.

Standard library only: ``install`` and ``doctor`` use these names without
loading the renderer (jinja2).
"""

from __future__ import annotations

SLURM_FRAGMENT = "slurmpool.conf"
GRES_CONF = "gres.conf"
CGROUP_CONF = "cgroup.conf"
JOB_SUBMIT_LUA = "job_submit.lua"
# Where install moves a site's own job_submit.lua, which slurmpool's runs first.
SITE_JOB_SUBMIT_LUA = "job_submit.site.lua"

# In the order they are generated and installed; the node config
# (:data:`slurmpool.configgen.nodeconfig.NODE_CONFIG_NAME`) comes with them.
SLURM_FILES = (SLURM_FRAGMENT, GRES_CONF, CGROUP_CONF, JOB_SUBMIT_LUA)
