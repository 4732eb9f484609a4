import PackagePlugin
@main struct ValidateTenants: CommandPlugin { func performCommand(context: PluginContext, arguments: [String]) async throws {} }
