import Database = require("better-sqlite3");
export = Database;
