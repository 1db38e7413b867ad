// V9: API.list / API.read path guards.
const listed = await API.list("mcp");
const errors = [];
for (const p of ["mcp/nope.d.ts", "../etc/passwd", "mcp/./x", ""]) {
  try {
    await API.read(p);
  } catch (e) {
    errors.push(e.message);
  }
}
return { listed, errors, mcpKeys: Object.keys(MCP) };
