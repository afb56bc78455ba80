"""The engine through Espresso's e5rt C API (e5rt-reference section 2), bound with ctypes.

Written to the documented interface and not yet run on Apple hardware: the tests drive it
against a stand-in C library that implements the same symbols with the documented calling
conventions and records every call (tests/runtime/e5rt_standin.c).

The sequence for one program (e5rt-reference sections 2.1-2.6):

1. compile once: compiler config (cache bundle location) -> compiler; options with device
   mask 0x4 (ANE), forced recompilation, segmenter "graph"; ``e5rt_e5_compiler_compile``
   on the MIL file -> library -> program function "main" -> operation options (name
   "main", intermediate buffers allocated) -> operation. The compiler, its config and
   options are released once the operation exists.
2. bind: per port, retain it, allocate a CPU buffer (type 0) of the program's uniform
   surface size, take its data pointer, bind it.
3. one stream; the operation encoded once.
4. each step: write inputs packed at byte 0 of their buffers, ``execute_sync``, read
   outputs from theirs. Resident state: an input port bound to an output port's buffer
   (section 2.5.1) is written by one step and read by the next without the host.
5. release in reverse order: operation, its options, function, library, buffers, ports,
   stream.

Every create entry point takes its out-pointer first (section 3); ``compile`` and the
``retain`` calls take it last, as section 2 lists them. Section 2.6 names the release
order but not the release calls' signatures: they are taken here to take the handle's
address (``void **``), like the create calls. Operational limits (section 5): a program
compiles and runs in the same process (a forked child may not use it), and a process
holds at most 128 loaded programs.

``ANEKIT_E5RT_LIBRARY`` names another library exporting the same symbols (the tests' stand-in).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.formats.mil import dtype_info
from anekit.formats.mil.values import WEIGHT_FILE
from anekit.runtime.binding import PinnedInputs, port_bytes

ESPRESSO = "/System/Library/PrivateFrameworks/Espresso.framework/Espresso"
DEVICE_ANE = 0x4
MAX_LOADED = 128  # e5rt-reference section 5.4: the 129th load in a process fails

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_S = ctypes.c_char_p
# symbol -> argument types (every call returns an int status, 0 on success)
SIGNATURES: dict[str, tuple] = {
    "e5rt_e5_compiler_config_options_create": (_PP,),
    "e5rt_e5_compiler_config_options_set_cache_bundle_location": (_P, _S),
    "e5rt_e5_compiler_create_with_config": (_PP, _P),
    "e5rt_e5_compiler_options_create": (_PP,),
    "e5rt_e5_compiler_options_set_compute_device_types_mask": (_P, ctypes.c_uint64),
    "e5rt_e5_compiler_options_set_force_recompilation": (_P, ctypes.c_bool),
    "e5rt_e5_compiler_options_set_segmenter": (_P, _S),
    "e5rt_e5_compiler_compile": (_P, _S, _P, _PP),
    "e5rt_program_library_retain_program_function": (_P, _S, _PP),
    "e5rt_precompiled_compute_op_create_options_create_with_program_function": (_PP, _P),
    "e5rt_precompiled_compute_op_create_options_set_operation_name": (_P, _S),
    "e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers": (_P, ctypes.c_bool),
    "e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options": (_PP, _P),
    "e5rt_execution_stream_operation_retain_input_port": (_P, _S, _PP),
    "e5rt_execution_stream_operation_retain_output_port": (_P, _S, _PP),
    "e5rt_buffer_object_alloc": (_PP, ctypes.c_size_t, ctypes.c_int),
    "e5rt_buffer_object_get_data_ptr": (_P, _PP),
    "e5rt_io_port_bind_buffer_object": (_P, _P),
    "e5rt_execution_stream_create": (_PP,),
    "e5rt_execution_stream_encode_operation": (_P, _P),
    "e5rt_execution_stream_execute_sync": (_P,),
    "e5rt_execution_stream_operation_release": (_PP,),
    "e5rt_precompiled_compute_op_create_options_release": (_PP,),
    "e5rt_program_function_release": (_PP,),
    "e5rt_program_library_release": (_PP,),
    "e5rt_buffer_object_release": (_PP,),
    "e5rt_io_port_release": (_PP,),
    "e5rt_execution_stream_release": (_PP,),
    "e5rt_e5_compiler_release": (_PP,),
    "e5rt_e5_compiler_options_release": (_PP,),
    "e5rt_e5_compiler_config_options_release": (_PP,),
}  # fmt: skip

_lock = threading.Lock()
_loaded = 0  # programs loaded in this process


def library_path() -> str:
    return os.environ.get("ANEKIT_E5RT_LIBRARY") or ESPRESSO


def unavailable() -> str | None:
    """Why e5rt cannot be used here, or None."""
    path = library_path()
    if path == ESPRESSO and sys.platform != "darwin":
        return (
            f"it needs macOS with Espresso.framework's e5rt API (an Apple silicon Mac); "
            f"this machine runs {sys.platform}. Run on 'sim' here"
        )
    if not Path(path).is_file():
        return f"no e5rt library at {path}"
    return None


class _Api:
    """The e5rt symbols of one library, each raising on a non-zero status."""

    def __init__(self, path: str):
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise AnekitError(f"cannot load the e5rt library {path}: {exc}") from None
        for name, argtypes in SIGNATURES.items():
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                raise AnekitError(f"{path} does not export {name}") from None
            fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
            setattr(self, name, fn)

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self, name)(*args)
        if status != 0:
            raise AnekitError(f"e5rt: {name} failed with status {status}")

    def create(self, name: str, *args: Any) -> ctypes.c_void_p:
        """A create call: the out-pointer first."""
        out = ctypes.c_void_p()
        self.call(name, ctypes.byref(out), *args)
        return out

    def retain(self, name: str, *args: Any) -> ctypes.c_void_p:
        """A compile or retain call: the out-pointer last."""
        out = ctypes.c_void_p()
        self.call(name, *args, ctypes.byref(out))
        return out

    def release(self, kind: str, handle: ctypes.c_void_p) -> None:
        if handle:
            self.call(f"e5rt_{kind}_release", ctypes.byref(handle))


_apis: dict[str, _Api] = {}


def api() -> _Api:
    reason = unavailable()
    if reason is not None:
        raise AnekitError(f"backend 'ane' cannot run here: {reason}")
    path = library_path()
    with _lock:
        if path not in _apis:
            _apis[path] = _Api(path)
        return _apis[path]


class E5Program(PinnedInputs):
    """One MIL program compiled and bound through e5rt (see the module docstring).

    ``inputs``/``outputs`` are the segment's ports (`SegmentIO`); every buffer is
    ``surface`` bytes (the program's uniform allocation). The MIL file's directory holds
    ``weights/weight.bin`` (``@model_path``).
    """

    def __init__(self, mil_path: Path, inputs: Any, outputs: Any, surface: int, cache_dir: Path):
        global _loaded
        self._api = api()
        with _lock:
            if _loaded >= MAX_LOADED:
                raise AnekitError(
                    f"this process has {_loaded} programs loaded on the engine, the most it "
                    f"can hold ({MAX_LOADED}, e5rt-reference section 5.4)",
                    hint="release sessions or programs you no longer use (Program.release('ane'))",
                )
            _loaded += 1
        self._counted = True
        self._pid = os.getpid()
        self.inputs = {io.mil_name: io for io in sorted(inputs, key=lambda io: io.mil_name)}
        self.outputs = {io.mil_name: io for io in sorted(outputs, key=lambda io: io.mil_name)}
        self._handles: dict[str, Any] = {}
        self._ports: list[ctypes.c_void_p] = []
        self._buffers: list[ctypes.c_void_p] = []
        self._in_ptr: dict[str, int] = {}
        self._out_ptr: dict[str, int] = {}
        self._out_buffer: dict[str, ctypes.c_void_p] = {}
        self._in_buffer: dict[str, ctypes.c_void_p] = {}
        self._in_port: dict[str, ctypes.c_void_p] = {}
        self._out_port: dict[str, ctypes.c_void_p] = {}
        self._paired: dict[str, str] = {}  # input -> the output it swaps buffers with
        self._fixed: set[str] = set()
        try:
            self._compile(mil_path, cache_dir)
            self._bind(surface)
            a = self._api
            self._handles["stream"] = a.create("e5rt_execution_stream_create")
            a.call(
                "e5rt_execution_stream_encode_operation",
                self._handles["stream"],
                self._handles["operation"],
            )
        except BaseException:
            self.release()
            raise

    def _compile(self, mil_path: Path, cache_dir: Path) -> None:
        a, h = self._api, self._handles
        config = a.create("e5rt_e5_compiler_config_options_create")
        compiler = options = None
        try:
            a.call(
                "e5rt_e5_compiler_config_options_set_cache_bundle_location",
                config,
                str(cache_dir).encode(),
            )
            compiler = a.create("e5rt_e5_compiler_create_with_config", config)
            options = a.create("e5rt_e5_compiler_options_create")
            a.call("e5rt_e5_compiler_options_set_compute_device_types_mask", options, DEVICE_ANE)
            a.call("e5rt_e5_compiler_options_set_force_recompilation", options, True)
            a.call("e5rt_e5_compiler_options_set_segmenter", options, b"graph")
            h["library"] = a.retain(
                "e5rt_e5_compiler_compile", compiler, str(mil_path).encode(), options
            )
            h["function"] = a.retain(
                "e5rt_program_library_retain_program_function", h["library"], b"main"
            )
            h["op_options"] = a.create(
                "e5rt_precompiled_compute_op_create_options_create_with_program_function",
                h["function"],
            )
            a.call(
                "e5rt_precompiled_compute_op_create_options_set_operation_name",
                h["op_options"],
                b"main",
            )
            a.call(
                "e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers",
                h["op_options"],
                True,
            )
            h["operation"] = a.create(
                "e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options",
                h["op_options"],
            )
        finally:  # the compiler and its options are not needed once the operation exists
            if options is not None:
                a.release("e5_compiler_options", options)
            if compiler is not None:
                a.release("e5_compiler", compiler)
            a.release("e5_compiler_config_options", config)

    def _bind(self, surface: int) -> None:
        a, op = self._api, self._handles["operation"]
        for kind, ports, pointers in (
            ("input", self.inputs, self._in_ptr),
            ("output", self.outputs, self._out_ptr),
        ):
            for name in ports:
                port = a.retain(
                    f"e5rt_execution_stream_operation_retain_{kind}_port", op, name.encode()
                )
                self._ports.append(port)
                buffer = a.create("e5rt_buffer_object_alloc", surface, 0)
                self._buffers.append(buffer)
                pointer = a.retain("e5rt_buffer_object_get_data_ptr", buffer)
                a.call("e5rt_io_port_bind_buffer_object", port, buffer)
                pointers[name] = int(pointer.value or 0)
                if kind == "output":
                    self._out_buffer[name], self._out_port[name] = buffer, port
                else:
                    self._in_buffer[name], self._in_port[name] = buffer, port
        self.surface = surface

    # --- what a session needs (the shape of `anekit.runtime.binding.Surfaces`) -----------

    def alias(self, input_name: str, output_name: str) -> None:
        """Bind the input port to the output port's buffer (e5rt-reference section 2.5.1)."""
        self._check_process()
        self._api.call(
            "e5rt_io_port_bind_buffer_object",
            self._in_port[input_name],
            self._out_buffer[output_name],
        )
        self._in_ptr[input_name] = self._out_ptr[output_name]
        self._fixed.add(input_name)

    def pair(self, input_name: str, output_name: str) -> None:
        """Double-buffer a state: the input keeps its own buffer, and :meth:`swap`
        exchanges it with the output's once a step's value is accepted."""
        self._paired[input_name] = output_name
        self._fixed.add(input_name)

    def swap(self, input_name: str) -> None:
        """Bind the input port to the buffer the output port just wrote, and the output
        port to the input's old buffer (the next step writes it)."""
        self._check_process()
        out = self._paired[input_name]
        a = self._api
        a.call("e5rt_io_port_bind_buffer_object", self._in_port[input_name], self._out_buffer[out])
        a.call("e5rt_io_port_bind_buffer_object", self._out_port[out], self._in_buffer[input_name])
        self._in_buffer[input_name], self._out_buffer[out] = (
            self._out_buffer[out], self._in_buffer[input_name],
        )  # fmt: skip
        self._in_ptr[input_name], self._out_ptr[out] = self._out_ptr[out], self._in_ptr[input_name]

    def write_input(self, name: str, array: np.ndarray) -> None:
        io = self.inputs[name]
        data = np.ascontiguousarray(array, dtype=dtype_info(io.mil_dtype).little_endian)
        if data.shape != io.mil_shape:
            raise AnekitError(
                f"port '{name}' takes {list(io.mil_shape)}, was given {list(data.shape)}"
            )
        ctypes.memmove(self._in_ptr[name], data.ctypes.data, port_bytes(io))

    def read_input(self, name: str) -> np.ndarray:
        return self._read(self._in_ptr[name], self.inputs[name])

    def read_output(self, name: str) -> np.ndarray:
        return self._read(self._out_ptr[name], self.outputs[name])

    def _read(self, pointer: int, io: Any) -> np.ndarray:
        dtype = dtype_info(io.mil_dtype).little_endian
        out = np.empty(io.mil_shape, dtype)
        ctypes.memmove(out.ctypes.data, pointer, port_bytes(io))
        return out

    # --- running ---------------------------------------------------------------------------

    def execute(self) -> None:
        self._check_process()
        self._api.call("e5rt_execution_stream_execute_sync", self._handles["stream"])

    def run(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write ``args`` (inputs not aliased or pinned), execute, read every output
        (fp16 widened to float32, as the simulator hands them)."""
        for name, array in args.items():
            self.write_input(name, array)
        self.execute()
        results = {}
        for name, io in self.outputs.items():
            value = self.read_output(name)
            results[name] = value.astype(np.float32) if io.mil_dtype == "fp16" else value
        return results

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise AnekitError(
                "this engine program was compiled in another process: a program compiles and "
                "runs in one process (e5rt-reference section 5.1; Espresso is not fork-safe)",
                hint="load the program again in this process",
            )

    def release(self) -> None:
        """Release in reverse order of creation (e5rt-reference section 2.6); idempotent."""
        global _loaded
        if getattr(self, "_released", False) or not getattr(self, "_counted", False):
            return
        self._released = True
        a, h = self._api, self._handles
        try:
            for kind, key in (("execution_stream_operation", "operation"),
                              ("precompiled_compute_op_create_options", "op_options"),
                              ("program_function", "function"), ("program_library", "library")):  # fmt: skip
                if key in h:
                    a.release(kind, h[key])
            for buffer in self._buffers:
                a.release("buffer_object", buffer)
            for port in self._ports:
                a.release("io_port", port)
            if "stream" in h:
                a.release("execution_stream", h["stream"])
        finally:
            with _lock:
                _loaded -= 1

    def __del__(self) -> None:
        if os.getpid() == getattr(self, "_pid", None):
            try:
                self.release()
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


def loaded() -> int:
    """Programs this process holds on the engine."""
    return _loaded


def stage(program_text: str, weights: bytes | None) -> Path:
    """A directory holding ``model.mil`` and ``weights/weight.bin`` for a program held in
    memory (e5rt compiles from a path); the caller removes it."""
    root = Path(tempfile.mkdtemp(prefix="anekit-e5rt-"))
    try:
        (root / "model.mil").write_text(program_text, encoding="utf-8")
        if weights is not None:
            (root / WEIGHT_FILE).parent.mkdir()
            (root / WEIGHT_FILE).write_bytes(weights)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root
