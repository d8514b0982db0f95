"""Scaling / ablation studies: a grid of ordinary runs (grid), power-law fits (fit), plots, a report.

    python scripts/study.py src/hfpretrain/study/specs/cpu_tiny.yaml --out studies/cpu_tiny

See docs/study.md.
"""
