// V9-V11, M3-M8, E9, E10: the MCP namespace, its virtual declarations and $api, reached only through MCP.*.
const files = await API.list("mcp");
const dts = await API.read("mcp/fake-mcp.d.ts");
const sum = await MCP.fakeMcp.getSum({ a: 2, b: 40 });
const same = await MCP["fake-mcp"]["get-sum"]({ a: 1, b: 1 });
const header = await MCP.fakeMcp.$api("getSum", { schema: true });
const resource = await MCP.fakeMcp.resources.read({ uri: "memo://one" });
let direct;
try { await tools.call("mcp:fake-mcp:get-sum", { a: 1, b: 2 }); } catch (e) { direct = e.code; }
let unknown;
try { await MCP.fakeMcp.$api("nope"); } catch (e) { unknown = e.code; }
return {
  files,
  dtsHasDecl: dts.includes("function getSum(input: {\n    a: number;\n    b: number;\n  }): Promise<McpToolResult>;"),
  dtsHasDocs: dts.includes("@param a First number"),
  sum: sum.structuredContent.sum,
  same: same.content[0].text,
  header,
  resource,
  direct,
  unknown,
  inAllTools: ALL_TOOLS.some((t) => t.source === "mcp"),
  inSearch: (await tools.search("sum of two numbers")).some((t) => t.id.startsWith("mcp:")),
  prompts: typeof MCP.fakeMcp.prompts,
};
