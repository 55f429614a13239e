"""Hardware files: the constants of the hardware a plan is made for, each with its source.

A hardware file is a small JSON file: the per-call floor of the fused kernel, the HBM's spec
bandwidth and the share of it a TBE reaches, the L2's size and bandwidth, the backward's cost
over the forward's, the memory, the devices per host and the links inside and between hosts.
Every constant carries (low, central, high) and names its source; plans are made at the
central values, and the constants listed under `envelope` span the corners a claim must hold
at (`Hardware.corners`). The files shipped sit beside this module (`hardware/NAME.json`); a
user may write their own and pass its path. `cpu` is this host: its kernel is the calibrated
analytic model (`dreamshard calibrate`'s fit, else the packaged weights) and its links the
gloo exchange measured here, today's behaviour and the default where no GPU is present.
"A profile" means a table family elsewhere; these are hardware files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from dreamshard.errors import DreamshardError

FOLDER = Path(__file__).with_name("hardware")
KERNELS = ("roofline", "calibrated")
# units: ms, GB/s (1e9 bytes a second), bytes; a ratio or a fraction where it says so
CONSTANTS = {
    "call_floor_ms": "per-call floor of one fused kernel launch (ms)",
    "hbm_spec_gbps": "HBM bandwidth on the spec sheet (GB/s)",
    "hbm_efficiency": "share of the spec bandwidth a TBE reaches (fraction)",
    "l2_bytes": "last-level (L2) cache size (bytes)",
    "l2_gbps": "L2 bandwidth (GB/s)",
    "row_bytes_min": "fewest bytes one row read costs, however narrow the row (bytes)",
    "bwd_fwd_ratio": "backward (with the optimizer update) over forward, kernel time (ratio)",
    "memory_bytes": "memory of one device (bytes)",
    "devices_per_host": "devices in one host",
    "intra_gbps": "all-to-all bandwidth a device sustains inside its host (GB/s)",
    "inter_gbps": "bandwidth a device sustains to other hosts (GB/s)",
    "intra_latency_ms": "per message to a peer in the same host (ms)",
    "inter_latency_ms": "per message to a peer on another host (ms)",
}
LINKS = ("intra_gbps", "intra_latency_ms")
REQUIRED = {"roofline": tuple(CONSTANTS), "calibrated": LINKS}
# "points": what gpu_tasks/calibrate_hardware.py timed to measure a file (kept, not read)
TOP_KEYS = (
    "name",
    "description",
    "kernel",
    "topology",
    "matches",
    "envelope",
    "constants",
    "points",
)
ENTRY_KEYS = ("low", "central", "high", "source")
GENERIC_GPU = "generic-gpu"


@dataclass(frozen=True)
class Constant:
    low: float
    central: float
    high: float
    source: str


@dataclass(frozen=True)
class Hardware:
    """One hardware file, read and checked (`load_hardware`)."""

    name: str
    description: str
    kernel: str  # "roofline" (the GPU kernel model) or "calibrated" (this host's fit)
    constants: dict[str, Constant]
    envelope: tuple[str, ...] = ()
    matches: tuple[str, ...] = ()  # substrings of torch.cuda.get_device_name() it stands for
    sha256: str = ""
    topology: str = ""  # the `costs.comm` preset its links are, where one is (a stable name)
    corner: dict[str, float] = field(default_factory=dict)  # constants moved off the centre

    def value(self, key: str) -> float:
        """The constant at this file's point: its corner value, else the central one."""
        if key in self.corner:
            return self.corner[key]
        return self.constants[key].central

    def get(self, key: str, default: float | None = None) -> float | None:
        return self.value(key) if key in self.constants else default

    @property
    def is_gpu(self) -> bool:
        return self.kernel == "roofline"

    def at(self, corner: dict[str, float]) -> Hardware:
        """The same file with some constants moved (a corner of its envelope)."""
        unknown = sorted(set(corner) - set(self.constants))
        if unknown:
            raise DreamshardError(f"hardware {self.name}: no constant {', '.join(unknown)}")
        return replace(self, corner={**self.corner, **corner})

    def corners(self) -> list[dict[str, float]]:
        """Every corner of the envelope: each envelope constant at its low or its high (2^k)."""
        ends = [(self.constants[k].low, self.constants[k].high) for k in self.envelope]
        return [dict(zip(self.envelope, values)) for values in itertools.product(*ends)]

    def label(self) -> str:
        """The name, with the corner when the file is not at its centre."""
        if not self.corner:
            return self.name
        return f"{self.name}[{', '.join(f'{k}={v:g}' for k, v in sorted(self.corner.items()))}]"

    def topology_name(self) -> str:
        """The `costs.comm` topology of this hardware's links (custom hosts; one host when the
        file gives no devices per host); the preset's name where the file names one and sits at
        its centre."""
        if self.topology and not self.corner:
            return self.topology
        per_host = int(self.get("devices_per_host", 0) or 0)
        intra = self.value("intra_gbps")
        parts = [
            f"per-host={per_host or 1_000_000}",
            f"intra={intra:g}",
            f"inter={self.get('inter_gbps', intra):g}",
            f"latency={self.value('intra_latency_ms'):g}",
            f"network-latency={self.get('inter_latency_ms', self.value('intra_latency_ms')):g}",
        ]
        return ",".join(parts)

    def record(self) -> dict:
        """What a plan file or a model's metadata records of the hardware it was made for."""
        return {"name": self.label(), "sha256": self.sha256}


def known_hardware() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.json"))


def load_hardware(spec: str | Path | Hardware | None) -> Hardware:
    """A hardware file by name (one shipped), by path, or as given; None: this host's
    (`detect_hardware`)."""
    if isinstance(spec, Hardware):
        return spec
    if spec is None:
        return detect_hardware()[0]
    text = str(spec)
    path = FOLDER / f"{text}.json"
    if not path.exists():
        path = Path(text)
        if not (text.endswith(".json") or os.sep in text) or not path.exists():
            raise DreamshardError(
                f"unknown hardware {text!r}; give one of {', '.join(known_hardware())} or the "
                "path of a hardware file (.json)"
            )
    return read_hardware(path)


def gpu_hardware(spec: str | Path | Hardware | None) -> Hardware | None:
    """The GPU hardware file `spec` names, or None for none or `cpu` (TorchRec's estimator
    then keeps its own constants)."""
    if spec is None:
        return None
    hardware = load_hardware(spec)
    return hardware if hardware.is_gpu else None


def read_hardware(path: Path) -> Hardware:
    """Read and check one hardware file; DreamshardError naming the file and the problem."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise DreamshardError(f"hardware file {path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DreamshardError(f"hardware file {path}: not a JSON object")
    where = f"hardware file {path}"
    _known_keys(data, TOP_KEYS, where)
    for key in ("name", "kernel", "constants"):
        if key not in data:
            raise DreamshardError(f"{where}: missing {key!r}")
    if data["kernel"] not in KERNELS:
        raise DreamshardError(f"{where}: kernel must be one of {', '.join(KERNELS)}")
    if not isinstance(data["constants"], dict):
        raise DreamshardError(f"{where}: constants must be an object")
    _known_keys(data["constants"], tuple(CONSTANTS), f"{where}: constants")
    constants = {}
    for key, entry in data["constants"].items():
        constants[key] = _constant(entry, f"{where}: constant {key}")
    missing = [k for k in REQUIRED[data["kernel"]] if k not in constants]
    if missing:
        raise DreamshardError(f"{where}: missing constant {', '.join(missing)}")
    envelope = tuple(data.get("envelope", ()))
    strays = [k for k in envelope if k not in constants]
    if strays:
        raise DreamshardError(f"{where}: envelope names no constant {', '.join(strays)}")
    return Hardware(
        name=str(data["name"]),
        description=str(data.get("description", "")),
        kernel=data["kernel"],
        constants=constants,
        envelope=envelope,
        matches=tuple(str(m) for m in data.get("matches", ())),
        sha256=hashlib.sha256(raw).hexdigest(),
        topology=_preset(data.get("topology", ""), where),
    )


def _preset(name: object, where: str) -> str:
    if not name:
        return ""
    from dreamshard.costs.comm import get_topology  # beside this module, in costs

    try:
        get_topology(str(name))
    except DreamshardError as exc:
        raise DreamshardError(f"{where}: topology: {exc}") from None
    return str(name)


def _known_keys(data: dict, known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise DreamshardError(
            f"{where}: unknown key {', '.join(map(repr, unknown))}; keys: {', '.join(known)}"
        )


def _constant(entry: object, where: str) -> Constant:
    if not isinstance(entry, dict):
        raise DreamshardError(f"{where}: give low, central, high and source")
    _known_keys(entry, ENTRY_KEYS, where)
    missing = [k for k in ENTRY_KEYS if k not in entry]
    if missing:
        raise DreamshardError(f"{where}: missing {', '.join(missing)}")
    values = []
    for key in ("low", "central", "high"):
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise DreamshardError(f"{where}: {key} must be a number above 0, not {value!r}")
        values.append(float(value))
    if not values[0] <= values[1] <= values[2]:
        raise DreamshardError(
            f"{where}: low {values[0]:g}, central {values[1]:g}, high {values[2]:g} are out of "
            "order (low <= central <= high)"
        )
    if not str(entry["source"]).strip():
        raise DreamshardError(f"{where}: the source is empty; say where the figure comes from")
    return Constant(*values, str(entry["source"]))


def detect_hardware() -> tuple[Hardware, str]:
    """This host's hardware file and a line saying how it was chosen: on a CUDA host the
    shipped file whose `matches` names the GPU (else the generic GPU file, said so); without
    a GPU, `cpu`."""
    if not Path("/proc/driver/nvidia").exists():  # no NVIDIA driver: no CUDA, torch not loaded
        return load_hardware("cpu"), "hardware: cpu (no GPU on this host)"
    import torch  # slow to import: only on a host that may have a GPU

    if not torch.cuda.is_available():
        return load_hardware("cpu"), "hardware: cpu (CUDA is not available)"
    return match_gpu(torch.cuda.get_device_name())


def match_gpu(device_name: str) -> tuple[Hardware, str]:
    """The shipped file for a GPU named `device_name` (the longest `matches` entry that the
    name holds), or the generic GPU file, with the line that says which."""
    best, length = None, 0
    for name in known_hardware():
        hardware = load_hardware(name)
        for pattern in hardware.matches:
            if pattern.lower() in device_name.lower() and len(pattern) > length:
                best, length = hardware, len(pattern)
    if best is None:
        return load_hardware(GENERIC_GPU), (
            f"hardware: {GENERIC_GPU} (no hardware file matches {device_name!r}; give "
            "--hardware NAME|FILE for figures of your GPU)"
        )
    return best, f"hardware: {best.name} (matched {device_name!r})"
