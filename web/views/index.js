// The views, in menu order. Each module: export default { id, title, render(root, args) },
// render returning a cleanup function.
export default [];
