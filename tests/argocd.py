"""The chart's Argo CD health check, run by a real Lua 5.1 interpreter (lupa), as Argo
CD runs it (gopher-lua, Lua 5.1): `obj` is the resource, the script returns its health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lupa import lua51

HEALTH_LUA = Path(__file__).resolve().parents[1] / "charts/dws-operator/argocd/health.lua"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) the health check gives `obj`."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=False)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA.read_text())
    return str(result["status"]), str(result["message"])
