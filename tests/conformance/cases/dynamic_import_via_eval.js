// X6, V17: dynamic import() built at run time is denied by the engine (no module loader).
const fs = await (0, eval)("imp" + "ort('fs')");
return typeof fs;
