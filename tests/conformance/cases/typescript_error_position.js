// @exec {"language": "typescript"}
// contract §14: run-time error positions of a TypeScript cell map back to its own lines.
interface Shipment { id: string; tons: number }
type Tons = number;

const s: Shipment = { id: "a", tons: 3 };
const limit: Tons = 2;
if (s.tons > limit) throw new RangeError(`too heavy: ${s.tons}`);
return s;
