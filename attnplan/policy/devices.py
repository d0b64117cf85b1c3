"""The device catalog (``rules/devices.yaml``) and simulated nodes built from it."""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .capability import format_capability, parse_capability
from attnplan.errors import InvalidInputError, RulePackError, UnknownDeviceError
from .facts import Fact, NodeFacts
from .version import SUPPORTED_FLASHINFER

ASSUMED_TORCH_CUDA = "13.0"


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    capability: str
    memory_gib: int = Field(gt=0)
    aliases: tuple[str, ...] = ()
    note: Optional[str] = None

    @property
    def capability_int(self) -> int:
        return parse_capability(self.capability)


def _key(name: str) -> str:
    key = re.sub(r"[\s\-_]+", "", name.lower())
    for prefix in ("nvidia", "geforce", "tesla"):
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix):]
    return key


class Catalog:
    def __init__(self, devices: list[Device]):
        self.devices = devices
        self._index: dict[str, Device] = {}
        for d in devices:
            for n in (d.name, *d.aliases):
                self._index.setdefault(_key(n), d)

    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def find(self, name: str) -> Optional[Device]:
        return self._index.get(_key(name))

    def get(self, name: str) -> Device:
        dev = self.find(name)
        if dev is None:
            keys = list(self._index)
            close_keys = difflib.get_close_matches(_key(name), keys, n=3, cutoff=0.5)
            close = list(dict.fromkeys(self._index[k].name for k in close_keys))
            raise UnknownDeviceError(name, close, self.names())
        return dev

    def for_capability(self, cap: int) -> list[Device]:
        return [d for d in self.devices if d.capability_int == cap]


@functools.lru_cache(maxsize=1)
def catalog() -> Catalog:
    import yaml

    from attnplan.rules import DEVICES_FILE

    try:
        data = yaml.load(DEVICES_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        devices = [Device.model_validate(d) for d in data["devices"]]
        for d in devices:
            parse_capability(d.capability)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValidationError, InvalidInputError) as exc:
        raise RulePackError(str(DEVICES_FILE), f"invalid device catalog: {exc}") from None
    return Catalog(devices)


def simulated_node(device: str | None = None, *, capability: str | int | None = None,
                   flashinfer_version: str | None = None, cubins: str | bool | None = None,
                   gpu_count: int | None = None, batch_invariant: bool | None = None,
                   hostname: str | None = None) -> NodeFacts:
    """Declared facts for a node you do not have (``--device B200``, ``--capability 10.3``).

    Unless declared, flashinfer is the supported version and cubins are available (both
    ``assumed``). ``cubins``: ``"available"`` / ``"missing"`` (or a bool).
    """
    if device is None and capability is None:
        raise InvalidInputError("device", "give a device name or a capability")
    name: Fact
    mem: Fact = Fact.unknown("not declared")
    if device is not None:
        dev = catalog().get(device)
        cap = dev.capability_int
        if capability is not None and parse_capability(capability) != cap:
            raise InvalidInputError("capability", f"{format_capability(parse_capability(capability))} contradicts "
                                    f"{dev.name}, which is {dev.capability}")
        name = Fact.declared(dev.name)
        mem = Fact.declared(dev.memory_gib, "device catalog")
        cap_fact = Fact.declared(cap, f"device catalog ({dev.name})")
    else:
        cap = parse_capability(capability)  # type: ignore[arg-type]
        matches = catalog().for_capability(cap)
        name = Fact.assumed(f"sm_{cap}" if not matches else matches[0].name + "-class",
                            "from capability")
        cap_fact = Fact.declared(cap)
    if flashinfer_version is not None:
        from packaging.version import InvalidVersion, Version

        try:
            Version(flashinfer_version)
        except InvalidVersion:
            raise InvalidInputError("flashinfer_version", f"{flashinfer_version!r} is not a version, e.g. 0.7.2.post1") from None
        fi = Fact.declared(flashinfer_version)
    else:
        fi = Fact.assumed(SUPPORTED_FLASHINFER, "the version attnplan supports")
    cubin_state = _cubins(cubins)
    if cubin_state is None:
        cubin_pkg = Fact.assumed(fi.value, "cubins assumed available")
        reach = Fact.assumed(None, "not probed for a simulated node")
    elif cubin_state:
        cubin_pkg = Fact.declared(fi.value, "cubins declared available")
        reach = Fact.declared(None, "not probed for a simulated node")
    else:
        cubin_pkg = Fact.declared(None, "cubins declared missing")
        reach = Fact.declared(False, "cubins declared missing")
    return NodeFacts(
        hostname=Fact.declared(hostname) if hostname else Fact.assumed("simulated"),
        gpu_name=name, capability=cap_fact,
        gpu_count=Fact.declared(gpu_count) if gpu_count else Fact.assumed(1),
        gpu_memory_gib=mem,
        flashinfer_version=fi, flashinfer_cubin_version=cubin_pkg,
        cubin_dir=Fact.assumed(None), cubin_dir_has_cubins=Fact.assumed(False if cubin_state is False else None),
        artifactory_reachable=reach,
        batch_invariant_env=Fact.declared(batch_invariant) if batch_invariant is not None else Fact.assumed(False),
        # A current software stack: torch for CUDA 13.0 (as on the measured H100) and a JIT toolchain.
        torch_cuda_version=Fact.assumed(ASSUMED_TORCH_CUDA, "assumed: a current torch CUDA build"),
        jit_toolchain=Fact.assumed(True, "assumed: nvcc or flashinfer-jit-cache present"),
        vllm_version=Fact.assumed(None, "not declared: the newest modelled vLLM is used"),
        sglang_version=Fact.assumed(None, "not declared: the newest modelled SGLang is used"),
    )


def _cubins(value: Any) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("available", "yes", "true", "present"):
        return True
    if text in ("missing", "no", "false", "absent"):
        return False
    raise InvalidInputError("cubins", f"{value!r} is not a cubin state", ["available", "missing"])
