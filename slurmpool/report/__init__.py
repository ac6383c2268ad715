"""Pool reports for admins, from Slurm accounting.

- :mod:`.sacct`: the streaming ``sacct --parsable2`` reader (pure parsing + the command);
- :mod:`.aggregate`: GPU-hours allocated (slice-weighted) and busy, by user, account,
  partition, model and profile; requeues; top wasters; the hour-by-device heatmap grid;
- :mod:`.render`: table, JSON and CSV;
- :mod:`.html`: the HTML report with inline SVG charts;
- :mod:`.heatmap`: the heatmap PNG (matplotlib, an optional extra).
"""
