// Parallel nested calls with Promise.all, joined in one cell.
const shipments = await tools.demo_shipping_list({});
const unpaid = shipments.filter((s) => !s.paid);
const customers = await Promise.all(
  [...new Set(unpaid.map((s) => s.customerId))].map((id) => tools.demo_customer_get({ id })),
);
const byId = Object.fromEntries(customers.map((c) => [c.id, c]));
return unpaid.map((s) => ({ shipment: s.id, tons: s.tons, customer: byId[s.customerId].name }));
