#!/usr/bin/env python3
"""Regenerate attnplan's copy of a trtllm-gen FMHA kernel table from FlashInfer's own artifact.

FlashInfer decides on the host whether a trtllm-gen attention kernel exists by looking its parameters up
in ``sTllmGenFmhaKernelMetaInfos`` (``cubins/<pin>/fmha/trtllm-gen/include/flashInferMetaInfo.h``,
checked against ``checksums.txt``). attnplan ships the fields its selection port reads (see
attnplan/kernels/trtllm_gen/table.py) as gzipped JSON, with the header's license notice and the
pin, so ``attnplan.kernels.trtllm_gen`` answers without the 458 MB cubin wheel.

    pip download --no-deps flashinfer-cubin==0.6.13 -d /tmp/cubin
    python scripts/trtllm_table.py /tmp/cubin/flashinfer_cubin-0.6.13-py3-none-any.whl \\
        -o attnplan/kernels/trtllm_gen/tables/158f6fa1.json.gz

The input is the wheel, or a directory holding ``include/flashInferMetaInfo.h`` and ``checksums.txt``
(a node's FLASHINFER_CUBIN_DIR / cache, ``cubins/<pin>/fmha/trtllm-gen``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnplan.kernels.trtllm_gen.table import parse_meta_info, parse_checksums  # noqa: E402


def _from_wheel(path: Path) -> tuple[str, str, str, str]:
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.endswith("fmha/trtllm-gen/include/flashInferMetaInfo.h")]
        if len(names) != 1:
            raise SystemExit(f"{path}: expected one fmha/trtllm-gen/include/flashInferMetaInfo.h, found {len(names)}")
        header = names[0]
        base = header[: -len("include/flashInferMetaInfo.h")]
        pin = base.split("/cubins/", 1)[1].split("/", 1)[0]
        return (zf.read(header).decode(), zf.read(base + "checksums.txt").decode(), pin,
                f"{path.name}:{header}")


def _from_dir(path: Path) -> tuple[str, str, str, str]:
    header = path / "include" / "flashInferMetaInfo.h"
    pin = path.parts[-3] if len(path.parts) >= 3 else "unknown"
    return header.read_text(), (path / "checksums.txt").read_text(), pin, str(header)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="flashinfer-cubin wheel, or a cubins/<pin>/fmha/trtllm-gen directory")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--origin", default=None, help="what to record as the table's origin (default: the input)")
    args = ap.parse_args(argv)
    if args.source.suffix == ".whl":
        text, checks, pin, origin = _from_wheel(args.source)
    else:
        text, checks, pin, origin = _from_dir(args.source)
    table = parse_meta_info(text, origin=args.origin or origin)
    sums = parse_checksums(checks, origin=origin)
    doc = table.to_json(pin=pin, checksums=sums)
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=False).encode()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0 and no file name in the gzip header: the same table gives the same bytes
    with open(args.output, "wb") as fh, gzip.GzipFile(filename="", fileobj=fh, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    print(f"{args.output}: {len(table.rows)} kernels, pin {pin}, {args.output.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
