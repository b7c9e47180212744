package airflowiceberg.flink;

/** The Iceberg release on the class path, as a writer declares it at the gate. */
final class IcebergRelease {
    private IcebergRelease() {}

    /** {@code IcebergBuild.version()} of the Iceberg on the class path, or null where there is none. */
    static String onClassPath() {
        try {
            Class<?> build = Class.forName("org.apache.iceberg.IcebergBuild", true, IcebergRelease.class.getClassLoader());
            Object version = build.getMethod("version").invoke(null);
            return version == null ? null : version.toString();
        } catch (ReflectiveOperationException | LinkageError e) {
            return null;  // no Iceberg here: the gate's rule then goes by the declared kind alone
        }
    }
}
