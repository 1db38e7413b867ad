// @exec {"restartSafe": true}
// V27, R1: a restartSafe cell may call read-only tools but side-effecting tools are refused before they run.
const shipments = await tools.demo_shipping_list({});
let refused;
try {
  await tools.demo_invoice_send({ shipmentId: shipments[0].id, amount: 10 });
} catch (e) {
  refused = { message: e.message, code: e.code };
}
return { read: shipments.length, refused };
