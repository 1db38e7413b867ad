// Throwing a value whose every member read throws (its getters are the cell's): the run still fails
// with a description, instead of its failure handler throwing and the run never settling.
throw {
  get name() { throw new Error("name"); },
  get message() { throw new Error("message"); },
  get stack() { throw new Error("stack"); },
};
