// The views, in menu order. Each module: export default { id, title, render(root, args) },
// render returning a cleanup function.
// uib's views: scripts, firewall, workers, history, administration
import scripts from './scripts.js';
import fw from './fw.js';
import workers from './workers.js';
import history from './history.js';
import admin from './admin.js';

export default [
  // uib
  scripts,
  fw,
  workers,
  history,
  admin,
];
