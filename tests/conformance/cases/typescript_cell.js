// @exec {"language": "typescript"}
// X5, V16: a TypeScript cell is transpiled and evaluated (types, interfaces, enums, generics, casts).
interface Shipment { id: string; customerId: string; paid: boolean; tons: number }
enum Weight { Light = 5, Heavy = 15 }
function heavy<T extends { tons: number }>(xs: T[], min: number = Weight.Heavy): T[] {
  return xs.filter((x) => x.tons >= min);
}
const shipments = (await tools.demo_shipping_list({})) as Shipment[];
const ids: string[] = heavy(shipments).map((s) => s.id);
class Counter { #n = 0; inc(): number { return ++this.#n; } }
const c = new Counter();
c.inc();
return { ids, count: c.inc(), light: Weight[5] };
