// placeholder until this module's first real file lands
