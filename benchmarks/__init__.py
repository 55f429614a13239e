"""The studies: each a `Study` (`study`) run by one runner (`runner`) and reported (`report`),
its results a rows file in `results/` and an MLflow run (`record`); `python -m benchmarks list`
names them.

Studies, one file each: `ood` (the default planner out of distribution, exact costs), `scale`
(hundreds of tables on 16-128 devices, two judges), `planners` (every planner side by side on
measured cost, the cpu suites' held-out tasks), `ablation` (what each part of the default
planner buys; `--backend fbgemm` on real kernels, its rows and report `ablation_fbgemm`'s),
`speed` (planning time and peak memory at 856 and 10,000 tables, each planner in a process of
its own), `torchrec` (plans in real TorchRec training steps against TorchRec's planner) and
`units` (plans for a GPU hardware file under both GPU judges, the roofline and TorchRec's
estimator, at the file's centre and corners) and `envelope` (the default planner planning for
a GPU file against the plain heuristics at the file's centre and every corner; `envelope_a100`
the same for the a100-80gb file, `envelope_428` and `envelope_wide` on 428 dlrm tables and on
856 of the wide family) and `published`
(the GPU units beside the published step times of NVIDIA-Merlin's synthetic models), and
`torchrec_fair` (`fair.py`: the default against TorchRec's planner given two minutes;
`torchrec_small` on 16 and 32 GPUs with TorchRec given 20 s, `torchrec_small_a100` the same for
the a100-80gb file), and
`reference_calibration` (the planner's predicted gains over TorchRec's plan against real DMP
steps: the reference rule's calibration) and `torchrec_step` (`DreamShardPlanner` as shipped
against TorchRec's planner in real training steps, held-out tasks; `torchrec_tune` adds
`DreamShardPlanner.tune`'s pick).
What several studies share, or one study alone needs, sits in `parts/`. The library never
imports this package; `tests/test_layout.py` keeps the wing small (at most 35% of the library's
lines, no file over 250 lines, no study importing another).
"""

# name -> "module:attribute" of its `Study`, imported only when run
STUDIES = {
    "ood": "benchmarks.ood:STUDY",
    "scale": "benchmarks.scale:STUDY",
    "torchrec": "benchmarks.torchrec:STUDY",
    "speed": "benchmarks.speed:STUDY",
    "ablation": "benchmarks.ablation:STUDY",
    "ablation_fbgemm": "benchmarks.ablation:FBGEMM",  # `ablation --backend fbgemm`'s rows
    "planners": "benchmarks.planners:STUDY",
    "units": "benchmarks.units:STUDY",
    "envelope": "benchmarks.envelope:STUDY",
    "envelope_a100": "benchmarks.envelope:A100",  # `envelope` for the a100-80gb file
    "envelope_428": "benchmarks.envelope:DLRM_428",  # `envelope` on 428 dlrm tables
    "envelope_wide": "benchmarks.envelope:WIDE",  # `envelope` on 856 tables of the wide family
    "published": "benchmarks.published:STUDY",
    "torchrec_fair": "benchmarks.fair:STUDY",
    "torchrec_small": "benchmarks.fair:SMALL",  # `torchrec_fair` on 16/32 GPUs, TorchRec 20 s
    "torchrec_small_a100": "benchmarks.fair:SMALL_A100",  # `torchrec_small` for a100-80gb
    "reference_calibration": "benchmarks.reference_calibration:STUDY",
    "torchrec_step": "benchmarks.torchrec_step:STUDY",
    "torchrec_tune": "benchmarks.torchrec_step:TUNED",  # `torchrec_step` with the tune's arm
}
