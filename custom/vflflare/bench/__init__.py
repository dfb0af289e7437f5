"""`vflflare bench`: every algorithm and baseline on one grid, and the leaderboard (issue 14)."""
