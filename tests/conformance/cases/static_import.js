// X6, V17: a static import is rejected before the cell runs.
text("this never runs");
import { readFileSync } from "fs";
