// V5, V6: every catalog-eligible tool is in ALL_TOOLS, with compact metadata and no schemas.
return {
  count: ALL_TOOLS.length,
  ids: ALL_TOOLS.map((t) => t.id),
  first: ALL_TOOLS[0],
  shipping: ALL_TOOLS.find((t) => t.name === "demo_shipping_list"),
  frozen: Object.isFrozen(ALL_TOOLS) && Object.isFrozen(ALL_TOOLS[0]),
  hasSchemas: ALL_TOOLS.some((t) => "parameters" in t),
};
