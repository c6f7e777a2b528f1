"""The `compute` section: dense GEMM TFLOPS per GPU in the contract's dtype, every GPU at once.

Measured with PyTorch (`pytest_gpuaccept.workloads.gemm`) for `duration`, while NVML samples SM clock,
power and temperature (drawn in the report beside the figure). Judged on the sustained figure (the
median of the second half of the run: a power-capped rack shows here first); the burst figure is shown
beside it. The threshold is `min_tflops`, or `min_fraction_of_peak` of the model's published dense
figure for the dtype (a model or dtype the table lacks: not measured, naming it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .. import schema
from ..measurements import GpuModels, LoadRun
from ..models import TABLE_FILE, Model
from ..probes import gemm
from ..probes._run import Command, Reading, parse_run
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Duration, parse_duration
from ..verdict import Check
from .base import Clause, PerGpu, Section
from .plausible import over_ceiling
from .sources import with_sources
from .utilisation import timeline_details, under_load

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.gemm import Gemm
    from ..session import Session

DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32", "fp64")
MARGIN = 0.10  # a figure may read 10 % above the published peak (boost above the datasheet clock, rounding)


@dataclass(frozen=True, slots=True)
class Compute:
    dtype: str
    min_tflops: float | None
    min_fraction_of_peak: float | None
    duration: Duration
    n: int


def _exactly_one(section: Compute, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if (section.min_tflops is None) == (section.min_fraction_of_peak is None):
        return [("compute", "expected exactly one of min_tflops and min_fraction_of_peak")]
    return []


SECTION = Section(
    "compute",
    {"dtype": Key(schema.one_of(*DTYPES), required=True), "min_tflops": Key(schema.number(0.0, 100000.0, low_open=True)),
     "min_fraction_of_peak": Key(schema.number(0.0, 1.0, low_open=True)),
     "duration": Key(schema.duration, default=parse_duration("30 s")), "n": Key(schema.whole(64, 65536), default=8192)},
    Compute, "dense GEMM TFLOPS per GPU, every GPU at once (PyTorch)", needs_gpu_count=True, cross_check=_exactly_one)


@dataclass(frozen=True, slots=True)
class GemmLoad:
    """The GEMM run, its NVML samples (as the utilisation load keeps them), and the GPUs' models."""

    reading: Reading[Gemm]
    load: LoadRun
    models: GpuModels

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.reading.evidence + self.load.evidence + self.models.evidence


def _published(model: Model | None, dtype: str) -> float | None:
    return model.tflops.get(dtype) if model is not None else None


def judge(section: Compute, subject: Subject, m: GemmLoad, contract: Contract) -> Check:
    assert subject.gpu is not None
    index = subject.gpu
    model = m.models.model(index)
    published = _published(model, section.dtype)
    v = CLAUSE.verdict(subject, evidence=m.evidence)
    if section.min_tflops is not None:
        minimum = section.min_tflops
    else:
        assert section.min_fraction_of_peak is not None
        if published is None:
            what = f"{model.name} has no published {section.dtype} figure" if model else m.models.missing(index)
            return v.not_measured(f"{what}: no figure to take {section.min_fraction_of_peak:g} of")
        minimum = section.min_fraction_of_peak * published
    v = v.but(required=f">= {minimum:g}", threshold=minimum)
    result = m.reading.value
    if result is None:
        return v.not_measured(m.reading.failure or "no measurement")
    if result.device != "cuda":
        return v.not_measured(f"the GEMM ran on the {result.device}, not on the GPUs: not a GPU figure")
    if result.dtype != section.dtype:
        return v.not_measured(f"the GEMM ran in {result.dtype}, the contract asks {section.dtype}")
    run = result.runs.get(index)
    if run is None:
        return v.failed(None, f"GPU{index} did not run the GEMM (ran: {sorted(result.runs)})")
    series, _failure = m.load.of(index)
    details: dict[str, Any] = timeline_details(series, None, 0.0, m.load.samples_file) if series is not None else {}
    details["burst_tflops"] = round(run.burst, 2)
    ended = run.windows[-1][0]
    if not run.done or ended < 0.9 * result.duration_s:
        return v.failed(None, f"GPU{index} stopped after {ended:.1f} s of the {result.duration_s:g} s run", details)
    if not run.finite:
        return v.failed(None, f"GPU{index}'s product is not finite: its arithmetic cannot be trusted", details)
    sustained = run.sustained(result.duration_s)
    details["sustained_tflops"] = round(sustained, 2)
    note = f", {sustained / published:.0%} of the published {published:g} ({model.name})" if published and model else ""
    if published:
        details["fraction_of_published"] = round(sustained / published, 4)
    ceiling = published * (1 + MARGIN) if published else None
    source = f"the model table ({TABLE_FILE}) for PCI device 0x{model.device_id} (sysfs)" if model else ""
    details.update({"physical_cap": published, "physical_cap_source": f"the published dense {section.dtype} peak; "
                    f"from {source}" if published else f"no published dense {section.dtype} peak of this GPU"})
    reason = f"physically impossible: the published dense {section.dtype} peak {published:g} TFLOPS + {MARGIN:.0%}, " \
             f"from {source}" if published else ""
    if ceiling is not None and run.burst > ceiling:
        check = v.failed(round(sustained, 3), f"GPU{index} burst {section.dtype} {run.burst:.1f} TFLOPS is implausible: "
                                              f"above {ceiling:g} TFLOPS ({reason})", details)
    else:
        what, suffix = f"GPU{index} sustained {section.dtype}", f" (burst {run.burst:.1f} TFLOPS, all GPUs at once, " \
                                                                 f"n={result.n}{note})"
        check = over_ceiling(v, sustained, minimum, ceiling, reason, what, details, suffix=suffix) \
            or v.at_least(sustained, minimum, what, details, suffix=suffix)
    return with_sources(check, "PyTorch GEMM timed by the plugin", "the published dense peak" if published else "",
                        unconfirmed=f"no published dense {section.dtype} peak to bound the figure with")


def gpuaccept_gemm(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                   gpuaccept_gpu_load: GemmLoad | None) -> GemmLoad:
    """Dense GEMM on every GPU at once for the contract's duration, NVML sampling beside it (once per run); the one
    GPU load utilisation and health read too, where it is shared (gpuaccept_gpu_load, clauses/together.py)."""
    if gpuaccept_gpu_load is not None:
        return gpuaccept_gpu_load
    seconds = SECTION.of(gpuaccept_contract).duration.seconds
    return gemm_load(gpuaccept_state, gpuaccept_contract, gpuaccept_models, seconds, "nvml-samples-gemm.json")


def gemm_load(state: Session, contract: Contract, models: GpuModels, seconds: float, samples_file: str,
              beside: Callable[[], object] | None = None) -> GemmLoad:
    """The GEMM in the contract's dtype and size on every GPU for `seconds`, NVML sampling it into `samples_file`
    until it ends by itself (or 120 s past its duration, past any start-up); `beside` made while it runs."""
    section = SECTION.of(contract)
    count = gpu_count(contract)
    command = Command("python", ("-m", gemm.MODULE, "--gpus", str(count), "--dtype", section.dtype, "--n", str(section.n),
                                 "--duration", f"{seconds:g}"), key="gemm_torch")
    load = under_load(state, command, seconds + 120.0, count, samples_file, seconds, models, beside)
    reading = parse_run(load.run, gemm.parse_gemm) if load.run is not None else None
    if reading is None:
        reading = Reading(None, None, load.failure or "the GEMM did not run")
    return GemmLoad(reading, load, models)


CLAUSE = Clause("compute", SECTION, "test_compute", PerGpu(), gpuaccept_gemm, judge,
                "sustained dense GEMM TFLOPS in `dtype`, every GPU at once, with burst, clock, power and temperature",
                "TFLOPS")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_gemm,)
