throw new Error("positions are the cell's own")
