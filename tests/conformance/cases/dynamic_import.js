// X6, V17: dynamic import() is rejected before the cell runs.
const fs = await import("node:fs");
return fs;
