package airflowiceberg.flink;

import java.util.HashMap;
import java.util.Map;

import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.flink.FlinkCatalogFactory;

/**
 * The gated table's current snapshot, read from its Iceberg catalog: what the {@code gated} SQL connector
 * acknowledges a pause with (its {@code gate.iceberg.*} options). A DataStream job may use it too.
 *
 * <p>The catalog is built from its properties as Iceberg's engines build it ({@code CatalogUtil}), with the
 * Hadoop configuration Flink's Iceberg catalog uses; Flink's {@code catalog-type} is read as Iceberg's
 * {@code type}. It needs Iceberg's Flink runtime on the job's class path, which its Iceberg sink needs anyway.
 */
public final class IcebergSnapshotIds implements SnapshotIdSupplier {
    private static final long serialVersionUID = 1L;

    private final String catalogName;
    private final HashMap<String, String> properties;
    private final String identifier;
    private transient Catalog catalog;
    private transient Table table;

    /**
     * @param catalogName the catalog's name (the first part of the gate's table name)
     * @param properties its properties: {@code type} or {@code catalog-impl}, {@code uri}, {@code warehouse}, ...
     * @param identifier the table in it, {@code namespace.table}
     */
    public IcebergSnapshotIds(String catalogName, Map<String, String> properties, String identifier) {
        this.catalogName = catalogName;
        this.properties = new HashMap<>(properties);
        String flinkType = this.properties.remove(FlinkCatalogFactory.ICEBERG_CATALOG_TYPE);
        if (flinkType != null) {
            this.properties.putIfAbsent(CatalogUtil.ICEBERG_CATALOG_TYPE, flinkType);
        }
        this.identifier = identifier;
    }

    @Override
    public void open() {
        catalog = CatalogUtil.buildIcebergCatalog(catalogName, properties, FlinkCatalogFactory.clusterHadoopConf());
        table = catalog.loadTable(TableIdentifier.parse(identifier));
    }

    @Override
    public Long currentSnapshotId() {
        table.refresh();  // the committer may have just committed: read the catalog again
        Snapshot current = table.currentSnapshot();
        return current == null ? null : current.snapshotId();
    }

    @Override
    public void close() throws Exception {
        if (catalog instanceof AutoCloseable) {
            ((AutoCloseable) catalog).close();
        }
    }

    /** The catalog and the table, never the properties: they may hold the catalog's password. */
    @Override
    public String toString() {
        return "IcebergSnapshotIds{" + catalogName + "." + identifier + "}";
    }
}
