// The views, in menu order. Each module: export default { id, title, render(root, args) },
// render returning a cleanup function.
import services from './services.js';
import events from './events.js';
import charts from './charts.js';
import scripts from './scripts.js';
import tester from './tester.js';
import fw from './fw.js';
import game from './game.js';
import workers from './workers.js';
import history from './history.js';
import admin from './admin.js';

export default [services, events, charts, scripts, tester, fw, game, workers, history, admin];
