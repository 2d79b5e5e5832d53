"""Reading the weights a student's script wrote, without ever running anything in them.

weights.npz is untrusted bytes. It is opened as a zip with bounded reads, every member must be a
`.npy` array whose header is parsed (numpy's own header parser, with its size cap) before any
data is read, and arrays are loaded with `allow_pickle=False`. Object arrays, pickles and files
that are not a zip of .npy arrays are refused: a pickled object is flagged as an unsafe
checkpoint (a pickle is code, and loading it would run the student's code with grader rights),
anything else malformed just scores 0. Then the arrays must match the documented model exactly."""

from __future__ import annotations

import io
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_MEMBER_BYTES = 8 * 1024 * 1024
MAX_HIDDEN = 1024
KEYS = ("mean", "scale", "W1", "b1", "W2", "b2")


class WeightsRefused(Exception):
    """The weights cannot be used; `unsafe` means they carried a pickled object."""

    def __init__(self, reason: str, *, unsafe: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unsafe = unsafe


@dataclass(frozen=True)
class Model:
    """The documented model: logits = relu(((x - mean) / scale) @ W1 + b1) @ W2 + b2."""

    mean: np.ndarray
    scale: np.ndarray
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    def predict(self, X: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            hidden = np.maximum(((X - self.mean) / self.scale) @ self.W1 + self.b1, 0.0)
            logits = hidden @ self.W2 + self.b2
        # A non-finite logit (overflow) is a wrong answer, never a lucky argmax.
        bad = ~np.isfinite(logits).all(axis=1)
        predictions = logits.argmax(axis=1)
        predictions[bad] = -1
        return predictions

    def same_as(self, other: Model) -> bool:
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in KEYS)


def _looks_pickled(raw: bytes) -> bool:
    return raw[:1] == b"\x80" or b"cposix\nsystem" in raw[:4096] or b"cbuiltins\n" in raw[:4096]


def _member_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    name = info.filename
    if info.file_size > MAX_MEMBER_BYTES:
        raise WeightsRefused(f"{name} is {info.file_size} bytes uncompressed, above {MAX_MEMBER_BYTES}")
    with zf.open(info) as member:
        raw = member.read(MAX_MEMBER_BYTES + 1)  # bounded even if the zip lies about the size
    if len(raw) > MAX_MEMBER_BYTES:
        raise WeightsRefused(f"{name} holds more than {MAX_MEMBER_BYTES} bytes")
    if _looks_pickled(raw):
        raise WeightsRefused(f"{name} is a pickle, not a .npy array", unsafe=True)
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except ValueError as exc:
        raise WeightsRefused(f"{name} is not a .npy array ({str(exc)[:120]})") from None
    if dtype.hasobject:
        raise WeightsRefused(f"{name} is an object array (pickled Python objects)", unsafe=True)
    if dtype.kind != "f" or dtype.itemsize not in (4, 8):
        raise WeightsRefused(f"{name} has dtype {dtype}; float32 or float64 arrays are required")
    try:
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise WeightsRefused(f"{name} could not be read as an array ({str(exc)[:120]})") from None
    if not isinstance(array, np.ndarray) or array.shape != shape:
        raise WeightsRefused(f"{name} is truncated or malformed")
    return array.astype(np.float64)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, refused (WeightsRefused) unless it is a plain zip of float .npy arrays."""
    st = path.lstat()
    if not stat.S_ISREG(st.st_mode):
        raise WeightsRefused("weights.npz is not a regular file")
    size = st.st_size
    if size > MAX_FILE_BYTES:
        raise WeightsRefused(f"weights.npz is {size} bytes, above {MAX_FILE_BYTES}")
    raw = path.read_bytes()
    if _looks_pickled(raw):
        raise WeightsRefused("weights.npz is a pickle, not an .npz archive", unsafe=True)
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise WeightsRefused("weights.npz is not an .npz archive (np.savez writes one)") from None
    arrays: dict[str, np.ndarray] = {}
    with zf:
        members = zf.infolist()
        if len(members) > 2 * len(KEYS):
            raise WeightsRefused(f"weights.npz holds {len(members)} members; the format has {len(KEYS)}")
        for info in members:
            if not info.filename.endswith(".npy"):
                unsafe = False
                with zf.open(info) as member:
                    unsafe = _looks_pickled(member.read(4096))
                raise WeightsRefused(f"weights.npz member {info.filename[:80]!r} is not a .npy array", unsafe=unsafe)
            try:
                arrays[info.filename[:-4]] = _member_array(zf, info)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError, OSError, ValueError) as exc:
                raise WeightsRefused(f"weights.npz member {info.filename[:80]!r} is corrupt ({str(exc)[:120]})") from None
    return arrays


def load_model(path: Path, features: int, classes: int) -> Model:
    """The model in `path`, checked against the documented format for this problem's sizes."""
    arrays = read_arrays(path)
    if set(arrays) != set(KEYS):
        missing, extra = sorted(set(KEYS) - set(arrays)), sorted(set(arrays) - set(KEYS))
        raise WeightsRefused(f"weights.npz must hold exactly {', '.join(KEYS)} (missing {missing or 'none'}, extra {extra or 'none'})")
    hidden = arrays["W1"].shape[1] if arrays["W1"].ndim == 2 else -1
    want = {"mean": (features,), "scale": (features,), "W1": (features, hidden), "b1": (hidden,),
            "W2": (hidden, classes), "b2": (classes,)}
    if not 1 <= hidden <= MAX_HIDDEN:
        raise WeightsRefused(f"W1 has shape {arrays['W1'].shape}; it must be ({features}, h) with 1 <= h <= {MAX_HIDDEN}")
    for key, shape in want.items():
        if arrays[key].shape != shape:
            raise WeightsRefused(f"{key} has shape {arrays[key].shape}, expected {shape}")
        if not np.isfinite(arrays[key]).all():
            raise WeightsRefused(f"{key} holds NaN or infinite values (did training diverge?)")
    if (arrays["scale"] == 0).any():
        raise WeightsRefused("scale holds zeros")
    return Model(**{k: arrays[k] for k in KEYS})
