// V8, contract §1 example: search -> describe -> callValue -> filter, in one cell.
const [shipmentTool] = await tools.search("list shipments");
const described = await tools.describe(shipmentTool.id);
const shipments = await tools.callValue(shipmentTool.id, {});
return {
  found: shipmentTool.id,
  described: { id: described.id, parameters: described.parameters, outputSchema: described.outputSchema },
  heavyUnpaid: shipments.filter((s) => !s.paid && s.tons > 10).map((s) => s.id),
};
