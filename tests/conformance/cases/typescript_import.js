// @exec {"language": "typescript"}
// X6: imports in TypeScript cells are module_access_denied, not syntax errors.
import type { Foo } from "./foo";
return 1;
