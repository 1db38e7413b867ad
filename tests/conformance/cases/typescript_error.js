// @exec {"language": "typescript"}
// contract §14: TypeScript diagnostics fail the cell with typescript_transform_failed and the cell's line.
const ok: number = 1;
const broken: = 2;
return ok;
