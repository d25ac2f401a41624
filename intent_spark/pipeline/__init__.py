"""The stage graph of ``intent run`` as data, its runner with resume, and the commands."""
