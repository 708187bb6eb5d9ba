"""Run `__main__.py` under the Pulumi SDK's mock engine and record the resource graph.

This is what `gpuforge preview` and the whole-program tests use. The recipe and its pitfalls
(stale root stack, leaked event loops, nondeterministic order) are in
shared/research/pulumi-feasibility.md §5 and §8; each fix is commented where it is applied.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import runpy
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class Registered:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    dependencies: tuple[str, ...]
    # (input name, URNs it was computed from): the engine's propertyDependencies, which the real
    # policy analyzer hands stack policies as PolicyResource.property_dependencies
    property_dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # pulumi.CustomTimeouts as the engine gets them: (create, update, delete), "" where unset
    custom_timeouts: tuple[str, str, str] = ("", "", "")
    # resource options the engine gets and a preview must show: kept on delete, deleted before replacement
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    import_id: str = ""  # the import option: an existing resource the stack adopts


@dataclass
class OfflineRun:
    project: str
    stack: str
    resources: list[Registered]
    outputs: dict[str, Any]
    duplicates: list[str] = field(default_factory=list)

    def of_type(self, type_token: str) -> list[Registered]:
        return sorted((r for r in self.resources if r.type == type_token), key=lambda r: r.name)

    def by_urn(self) -> dict[str, Registered]:
        return {r.urn: r for r in self.resources}


class RecordingMonitor(MockMonitor):
    """MockMonitor that keeps every registration (type, name, parent, inputs) and the exports."""

    def __init__(self, mocks: pulumi.runtime.Mocks, offline_preview: bool = True) -> None:
        super().__init__(mocks)
        # False: the program takes `pulumi up`'s path (cli/program.py running_offline), so
        # its deploy-only refusals apply; the tests of what `pulumi up` refuses run it so.
        self.offline_preview = offline_preview
        self.registered: list[Registered] = []
        self.duplicates: list[str] = []
        self.stack_outputs: dict[str, Any] = {}
        self._urns: set[str] = set()
        self._lock = threading.Lock()

    def RegisterResource(self, request: Any) -> Any:
        resp = super().RegisterResource(request)
        is_stack = request.type == STACK_TYPE
        inputs = {} if is_stack else rpc.deserialize_properties(request.object)
        with self._lock:
            if is_stack:
                # set_mocks registers a Stack of its own; keep only the program's.
                self.registered = [r for r in self.registered if r.type != STACK_TYPE]
            elif resp.urn in self._urns:
                self.duplicates.append(resp.urn)  # the real engine rejects these; mocks do not
            self._urns.add(resp.urn)
            self.registered.append(
                Registered(
                    urn=resp.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent,
                    custom=bool(request.custom),
                    inputs=_ints(inputs),
                    dependencies=tuple(request.dependencies),
                    property_dependencies=tuple((k, tuple(v.urns)) for k, v in sorted(request.propertyDependencies.items())),
                    custom_timeouts=(request.customTimeouts.create, request.customTimeouts.update,
                                     request.customTimeouts.delete),
                    retain_on_delete=bool(request.retainOnDelete),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    import_id=request.importId,
                )
            )
        return resp

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if request.urn.split("::")[2] == STACK_TYPE:
            self.stack_outputs = _ints(rpc.deserialize_properties(request.outputs))
        return super().RegisterResourceOutputs(request)


def _ints(value: Any) -> Any:
    """Protobuf Structs carry every number as a float: give integral ones back as int. A file
    asset (the node wheels' objects, components/nodeinstall.py) is recorded by its path, as the
    engine's own preview shows it, so the recorded graph is the same bytes on every run."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, pulumi.FileAsset):
        return {"fileAsset": str(value.path)}
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@contextmanager
def _no_source_positions() -> Iterator[None]:
    """Skip the SDK's per-resource stack capture while running offline.

    The SDK walks and formats the whole Python stack for every resource so that the real engine
    can point at the source line in its messages; the mock monitor discards it. It is a third
    of the preview's time at 256 nodes (bench/preview_scale.py), so offline runs skip it.
    """
    from pulumi.runtime import resource as sdk_resource

    original = sdk_resource._get_stack_trace
    sdk_resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = original


def run_isolated(fn: Callable[[], Any]) -> Any:
    """Run `fn` with a private default executor whose worker event loops are closed afterwards.

    MockMonitor creates an event loop in each executor thread and never closes it; under
    `filterwarnings = error` those leak as ResourceWarnings into unrelated tests.
    """
    loops: list[asyncio.AbstractEventLoop] = []
    lock = threading.Lock()

    def init_worker() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        with lock:
            loops.append(loop)

    loop = _main_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, initializer=init_worker)
    loop.set_default_executor(pool)
    try:
        return fn()
    finally:
        pool.shutdown(wait=True)
        for worker_loop in loops:
            worker_loop.close()
        # A fresh lazy pool so that later runs in this process still have an executor.
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=4))


def _main_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


@contextmanager
def _program_context(project_dir: Path) -> Iterator[None]:
    old_cwd, old_path = os.getcwd(), list(sys.path)
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PULUMI_CONFIG")}
    sys.path.insert(0, str(project_dir))
    os.chdir(project_dir)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path
        os.environ.update(saved_env)


def _run_main(main: Path) -> None:
    runpy.run_path(str(main), run_name="__main__")


def run_program(
    project_dir: Path,
    project: str,
    stack: str,
    config: dict[str, str],
    secret_keys: list[str],
    mocks: pulumi.runtime.Mocks,
    preview: bool = False,
    as_pulumi_up: bool = False,
) -> OfflineRun:
    """Execute `<project_dir>/__main__.py` as the Pulumi language host would, under mocks.
    `as_pulumi_up`: the program takes the real engine's path (refusals that only `pulumi up`
    makes apply); by default it runs as the offline preview."""
    run, error = attempt_program(project_dir, project, stack, config, secret_keys, mocks, preview, as_pulumi_up)
    if error is not None:
        raise error
    return run


def attempt_program(
    project_dir: Path,
    project: str,
    stack: str,
    config: dict[str, str],
    secret_keys: list[str],
    mocks: pulumi.runtime.Mocks,
    preview: bool = False,
    as_pulumi_up: bool = False,
) -> tuple[OfflineRun, Exception | None]:
    """`run_program` that also returns what was registered when the program fails: a refusal
    must come before the first resource, and this is how the tests count them."""
    monitor = RecordingMonitor(mocks, offline_preview=not as_pulumi_up)
    # A stale root Stack from an earlier run would parent this run's resources: reset it first.
    settings.set_root_resource(None)  # type: ignore[arg-type]
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=monitor)
    settings.set_root_resource(None)  # type: ignore[arg-type]  # let run_in_stack make the program's Stack
    pulumi.runtime.set_all_config(dict(config), list(secret_keys))
    main = project_dir / "__main__.py"
    error: Exception | None = None
    try:
        with _program_context(project_dir), _no_source_positions():
            run_isolated(lambda: _sync_await(run_in_stack(lambda: _run_main(main))))
    except Exception as exc:  # noqa: BLE001 - handed back with what was registered before it
        error = exc
    finally:
        pulumi.runtime.set_all_config({}, [])
    run = OfflineRun(project, stack, list(monitor.registered), dict(monitor.stack_outputs), list(monitor.duplicates))
    return run, error
