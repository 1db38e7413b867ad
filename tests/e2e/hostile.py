"""Hardening end to end: Python's official `mcp` client drives `codemode serve` in front of
a hostile upstream MCP server (`hostile_server.js`) and checks, through the real MCP surface:

  - a namespace is never thenable and never coerced through a tool: `await MCP.hostile`,
    `String(...)`, template literals, `+x`, `JSON.stringify`, `json()` call no upstream tool
    (the server logs every call it receives);
  - tools named `then`, `toString`, ... are reachable only through `$call`, and `$api` says so;
  - the generated `mcp/hostile.d.ts` keeps every hostile description inside its comments;
  - a TypeScript cell nested deeply enough to overflow the transform fails cleanly, and the server
    keeps serving (the same session runs the next cell);
  - errors teach: unknown `tools.x` / `MCP.server.x` names suggest the nearest ones, shell commands
    and timers/fetch say what to do instead, positions are the cell's own;
  - cancelling an `exec` that waits on an upstream call that never answers aborts the
    run and sends `notifications/cancelled` to the upstream server.

Usage: hostile.py CODEMODE_BIN CONFIG_FILE CALL_LOG
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result_json(res) -> dict:
    if res.structured_content is not None:
        return res.structured_content
    return json.loads(res.content[0].text)


def code_outside_comments_and_strings(src: str) -> str:
    """The TypeScript source without comments and string literals, read the way a lexer reads it."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("/*", i):
            end = src.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif src.startswith("//", i):
            while i < n and src[i] not in "\n\r\u2028\u2029":
                i += 1
        elif src[i] in "\"'":
            q, i = src[i], i + 1
            while i < n and src[i] != q:
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def calls(log: str) -> list[str]:
    try:
        with open(log, encoding="utf-8") as f:
            return [line for line in f.read().split("\n") if line]
    except FileNotFoundError:
        return []


async def main(bin_path: str, config: str, log: str) -> None:
    params = StdioServerParameters(
        command=bin_path,
        args=["serve", "--config", config, "--demo-tools"],
        env={**os.environ, "RUST_LOG": "warn"},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()

            async def exec_(code: str, language: str = "javascript") -> dict:
                res = await asyncio.wait_for(s.call_tool("exec", {"code": code, "language": language}), 30)
                return result_json(res)

            # 1. Coercion and await never reach a tool.
            r = await exec_(
                """
                const ns = MCP.hostile;
                const seen = {};
                seen.awaited = typeof (await ns);
                for (const [k, f] of Object.entries({
                  string: () => String(ns), template: () => `${ns}`, plus: () => +ns,
                  stringify: () => JSON.stringify(ns), concat: () => "" + ns,
                })) {
                  try { seen[k] = f(); } catch (e) { seen[k] = e.name; }
                }
                json(ns);
                text(ns);
                seen.keys = Object.keys(ns).sort();
                return seen;
                """
            )
            assert r["status"] == "completed", r
            assert r["value"]["awaited"] == "object", r
            assert calls(log) == [], f"coercion called upstream tools: {calls(log)}"
            keys = r["value"]["keys"]
            for internal in ["then", "toString", "valueOf", "toJSON", "constructor", "hasOwnProperty"]:
                assert internal not in keys, (internal, keys)
            assert "echo" in keys and "get-sum" in keys and "getSum" in keys, keys
            assert "toString" not in keys and "to-string" in keys, "an alias never becomes an internal name"

            # 2. Explicit calls work, and $api names the explicit form.
            r = await exec_(
                """
                const a = await MCP.hostile.$call("then", {});
                const b = await MCP.hostile.$call("toString", {});
                const c = await MCP.hostile.$call("$api", {});
                const d = await MCP.hostile.echo({});
                const api = await MCP.hostile.$api("then");
                return { a: a.structuredContent, b: b.structuredContent, c: c.structuredContent,
                         d: d.structuredContent, call: api.tools[0].call };
                """
            )
            assert r["status"] == "completed", r
            v = r["value"]
            assert [v["a"]["called"], v["b"]["called"], v["c"]["called"], v["d"]["called"]] == ["then", "toString", "$api", "echo"], v
            assert v["call"] == 'MCP.hostile.$call("then", input)', v
            assert calls(log) == ["then", "toString", "$api", "echo"], calls(log)

            # 3. The generated declarations keep hostile text inside comments.
            r = await exec_('return await API.read("mcp/hostile.d.ts")')
            assert r["status"] == "completed", r
            dts = r["value"]
            code = code_outside_comments_and_strings(dts)
            assert "pwned" not in code, f"hostile text outside comments and strings:\n{code}"
            assert "\u2028" not in dts and "\u2029" not in dts, "raw line separators in the .d.ts"
            assert 'function $call(toolName: string' in dts, dts[:400]

            # 4. A TypeScript cell too deep for the transform fails cleanly; the server lives on.
            deep = "return " + "(" * 50000 + "1" + ")" * 50000
            r = await exec_(deep, "typescript")
            assert r["status"] == "failed" and r.get("code") == "typescript_transform_failed", r
            chain = "return 1" + "+1" * 60000
            r = await exec_(chain, "typescript")
            assert r["status"] == "failed" and r.get("code") == "typescript_transform_failed", r
            r = await exec_("const x: number = 41; return x + 1", "typescript")
            assert r == {**r, "status": "completed", "value": 42}, r

            # 5. Errors that teach.
            r = await exec_("return await tools.demo_ech({})")
            assert r["status"] == "failed" and r.get("code") == "nested_tool_failed", r
            assert "no catalog tool is named `demo_ech`" in r["error"] and "tools.demo_echo" in r["error"], r
            r = await exec_("return await MCP.hostile.ecoh({})")
            assert r["status"] == "failed" and '"echo"' in r["error"], r
            r = await exec_("ls -la")
            assert r["status"] == "failed" and r.get("code") == "invalid_input", r
            assert r["error"].startswith("exec runs JavaScript, not shell"), r
            r = await exec_("setTimeout(() => 1, 10)")
            assert r["status"] == "failed" and r.get("code") == "module_access_denied", r
            assert "yield_control" in r["error"], r
            r = await exec_("await fetch('https://example.com')")
            assert r["status"] == "failed" and "no network" in r["error"], r
            r = await exec_("throw new Error('here')")
            # The wrapper's 20 columns are not counted: `Error` starts at column 11 of the cell.
            assert r["status"] == "failed" and "<cell>:1:11)" in r["error"], r
            r = await exec_("interface A { a: number }\n\nconst a: A = { a: 1 };\nthrow new Error('ts ' + a.a)", "typescript")
            assert r["status"] == "failed" and "<cell>:4:" in r["error"], r

            assert calls(log) == ["then", "toString", "$api", "echo"], f"unexpected upstream calls: {calls(log)}"

            # A cancelled exec aborts its run, and the upstream call it was waiting on is
            # cancelled too (`notifications/cancelled` reaches the upstream server).
            try:
                await asyncio.wait_for(s.call_tool("exec", {"code": "return await MCP.hostile.hang({})"}), 1.0)
                raise AssertionError("the hanging exec should have been cancelled")
            except asyncio.TimeoutError:
                pass
            for _ in range(50):
                if "cancelled" in calls(log):
                    break
                await asyncio.sleep(0.1)
            assert calls(log)[-2:] == ["hang", "cancelled"], f"upstream was not told: {calls(log)}"
            print("ok: hostile")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
