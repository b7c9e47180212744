package airflowiceberg.devkit;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * One-JVM HDFS (1 NameNode + 1 DataNode) and YARN (1 RM + 1 NM) for tests.
 *
 * Usage: java -cp ... airflowiceberg.devkit.MiniHadoop CONF_DIR [WORK_DIR] (devkit/mini_hadoop.py runs it)
 * Writes core-site.xml, hdfs-site.xml, yarn-site.xml into CONF_DIR (use it as
 * HADOOP_CONF_DIR / YARN_CONF_DIR), prints "READY ..." and runs until stdin
 * reaches EOF or the process gets SIGTERM/SIGINT.
 *
 * Tunables (system properties): mini.nm.memory.mb (8192), mini.nm.vcores (4).
 */
public final class MiniHadoop {
  private static final AtomicBoolean STOPPED = new AtomicBoolean(false);
  private static volatile MiniDFSCluster dfs;
  private static volatile MiniYARNCluster yarn;

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable t) {
      t.printStackTrace();
      System.out.println("FAILED " + t);
      System.out.flush();
      shutdown();
      Runtime.getRuntime().halt(1);
    }
  }

  private static void run(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: MiniHadoop CONF_DIR [WORK_DIR]");
      System.exit(2);
    }
    long t0 = System.nanoTime();
    File confDir = new File(args[0]).getAbsoluteFile();
    File workDir = new File(args.length > 1 ? args[1] : "mini-hadoop-work").getAbsoluteFile();
    Files.createDirectories(confDir.toPath());
    Files.createDirectories(workDir.toPath());
    int nmMemMb = Integer.getInteger("mini.nm.memory.mb", 8192);
    int nmVcores = Integer.getInteger("mini.nm.vcores", 4);

    Runtime.getRuntime().addShutdownHook(new Thread(MiniHadoop::shutdown, "mini-hadoop-stop"));

    // ---------------- HDFS ----------------
    Configuration hconf = new HdfsConfiguration();
    hconf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(workDir, "dfs").getPath());
    hconf.setInt("dfs.replication", 1);
    hconf.setBoolean("dfs.permissions.enabled", false); // any HADOOP_USER_NAME may write
    hconf.set("hadoop.proxyuser." + System.getProperty("user.name") + ".hosts", "*");
    hconf.set("hadoop.proxyuser." + System.getProperty("user.name") + ".groups", "*");
    dfs = new MiniDFSCluster.Builder(hconf)
        .numDataNodes(1)
        .format(true)
        .build();
    dfs.waitActive();
    String defaultFs = dfs.getFileSystem().getUri().toString();
    FileSystem fs = dfs.getFileSystem();
    // world-writable /tmp and /user like a real cluster
    for (String d : new String[] {"/tmp", "/user"}) {
      fs.mkdirs(new Path(d));
      fs.setPermission(new Path(d), new FsPermission((short) 01777));
    }
    long tDfs = System.nanoTime();

    // ---------------- YARN ----------------
    YarnConfiguration yconf = new YarnConfiguration(dfs.getConfiguration(0));
    yconf.set("fs.defaultFS", defaultFs);
    // Capacity scheduler queues: hadoop-client-minicluster ships no capacity-scheduler.xml.
    if (Thread.currentThread().getContextClassLoader().getResource("capacity-scheduler.xml") == null) {
      String q = "yarn.scheduler.capacity.root.";
      yconf.set(q + "queues", "default");
      yconf.set(q + "capacity", "100");
      yconf.set(q + "default.capacity", "100");
      yconf.set(q + "default.maximum-capacity", "100");
      yconf.set(q + "default.user-limit-factor", "1");
      yconf.set(q + "default.state", "RUNNING");
      yconf.set(q + "default.acl_submit_applications", "*");
      yconf.set(q + "default.acl_administer_queue", "*");
      yconf.set("yarn.scheduler.capacity.node-locality-delay", "-1");
    }
    // Default 0.1 would cap AM containers at 10% of the NM (a cluster-mode Spark driver needs ~1.4 GiB).
    yconf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
    yconf.setInt(YarnConfiguration.NM_PMEM_MB, nmMemMb);
    // MiniYARNCluster overwrites NM_PMEM_MB with this key (default 4096) in each NM's config.
    yconf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, nmMemMb);
    yconf.setInt(YarnConfiguration.NM_VCORES, nmVcores);
    yconf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    yconf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, nmMemMb);
    yconf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, nmVcores);
    yconf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    yconf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    yconf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
    // keep finished containers' dirs/logs around briefly for debugging; aggregate logs off
    yconf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 600);
    yconf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
    yconf.set(YarnConfiguration.NM_ENV_WHITELIST,
        "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,"
            + "HADOOP_YARN_HOME,HADOOP_MAPRED_HOME,PATH,LANG,TZ");
    yconf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    // NM stop waits (sigkill delay + kill wait + 1 s) for finished apps that it still tracks; shorten it.
    yconf.setLong(YarnConfiguration.NM_SLEEP_DELAY_BEFORE_SIGKILL_MS, 250);
    yconf.setLong(YarnConfiguration.NM_PROCESS_KILL_WAIT_MS, 500);

    // MiniYARNCluster puts its dirs under ./target/<name> (relative to the cwd: run.sh cds to the work dir).
    yarn = new MiniYARNCluster("mini-yarn", 1, 1, 1);
    yarn.init(yconf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("NodeManager did not register with the RM in 60 s");
    }
    Configuration live = yarn.getConfig();
    // The RM address is written back into the config once its port is bound.
    long deadline = System.currentTimeMillis() + 30_000;
    while (live.get(YarnConfiguration.RM_ADDRESS, "").endsWith(":0")) {
      if (System.currentTimeMillis() > deadline) throw new IllegalStateException("RM port not bound");
      Thread.sleep(100);
    }
    fixRmGuiceFilter(yarn);
    long tYarn = System.nanoTime();

    // ---------------- client configuration ----------------
    Configuration base = new YarnConfiguration(new HdfsConfiguration()); // all *-default.xml
    Map<String, String> core = new TreeMap<>();
    Map<String, String> hdfs = new TreeMap<>();
    Map<String, String> yarnSite = new TreeMap<>();
    core.put("fs.defaultFS", defaultFs);
    core.put("hadoop.tmp.dir", new File(workDir, "hadoop-tmp").getPath());
    for (Map.Entry<String, String> e : live) {
      String k = e.getKey();
      String v = live.get(k); // resolved value
      if (v == null || v.equals(base.get(k))) continue;
      if (k.startsWith("yarn.")) yarnSite.put(k, v);
      else if (k.startsWith("dfs.")) hdfs.put(k, v);
    }
    // NameNode addresses for clients that only read hdfs-site.xml
    hdfs.put("dfs.replication", "1");
    hdfs.put("dfs.client.use.datanode.hostname", "false");
    writeXml(new File(confDir, "core-site.xml"), core);
    writeXml(new File(confDir, "hdfs-site.xml"), hdfs);
    writeXml(new File(confDir, "yarn-site.xml"), yarnSite);

    String rm = live.get(YarnConfiguration.RM_ADDRESS);
    String web = live.get(YarnConfiguration.RM_WEBAPP_ADDRESS);
    System.out.printf("READY fs.defaultFS=%s rm=%s rm.web=http://%s conf=%s dfs_s=%.1f yarn_s=%.1f total_s=%.1f%n",
        defaultFs, rm, web, confDir, (tDfs - t0) / 1e9, (tYarn - tDfs) / 1e9, (tYarn - t0) / 1e9);
    System.out.flush();

    // ---------------- run until stdin EOF or signal ----------------
    InputStream in = System.in;
    byte[] buf = new byte[256];
    try {
      while (in.read(buf) >= 0) {
        // ignore input; EOF means stop
      }
    } catch (IOException ignored) {
      // treat as EOF
    }
    System.out.println("STOPPING (stdin closed)");
    shutdown();
    System.out.println("STOPPED");
    System.exit(0);
  }

  /**
   * RM and NM web apps live in one JVM. Jetty instantiates GuiceFilter by class name, and such
   * a GuiceFilter dispatches through Guice's *static* pipeline, which belongs to whichever
   * injector was created last: the NodeManager's. Result: the RM port answers /ws/v1/cluster/*
   * with the NM's routes (404 "controller for v1 not found"). Hadoop's WebApp keeps a GuiceFilter
   * that was created by its own injector (bound to its own pipeline); put that one into the
   * RM's Jetty filter holder.
   */
  private static void fixRmGuiceFilter(MiniYARNCluster y) {
    try {
      Object rm = y.getResourceManager();
      java.lang.reflect.Method gw =
          org.apache.hadoop.yarn.server.resourcemanager.ResourceManager.class.getDeclaredMethod("getWebapp");
      gw.setAccessible(true);
      org.apache.hadoop.yarn.webapp.WebApp wa = (org.apache.hadoop.yarn.webapp.WebApp) gw.invoke(rm);
      java.lang.reflect.Field gf = org.apache.hadoop.yarn.webapp.WebApp.class.getDeclaredField("guiceFilter");
      gf.setAccessible(true);
      Object own = gf.get(wa);
      org.apache.hadoop.shaded.org.eclipse.jetty.servlet.ServletHandler sh =
          wa.httpServer().getWebAppContext().getServletHandler();
      java.lang.reflect.Field ff =
          org.apache.hadoop.shaded.org.eclipse.jetty.servlet.FilterHolder.class.getDeclaredField("_filter");
      ff.setAccessible(true);
      int n = 0;
      for (org.apache.hadoop.shaded.org.eclipse.jetty.servlet.FilterHolder h : sh.getFilters()) {
        Object f = ff.get(h);
        if (f != null && f != own
            && f.getClass() == org.apache.hadoop.shaded.com.google.inject.servlet.GuiceFilter.class) {
          ff.set(h, own);
          n++;
        }
      }
      System.err.println("fixRmGuiceFilter: replaced " + n + " GuiceFilter instance(s) on the RM web app");
    } catch (ReflectiveOperationException | RuntimeException e) {
      System.err.println("fixRmGuiceFilter failed, RM REST may answer with NM routes: " + e);
    }
  }

  private static void shutdown() {
    if (!STOPPED.compareAndSet(false, true)) return;
    try {
      if (yarn != null) yarn.stop();
    } catch (Throwable t) {
      System.err.println("yarn stop: " + t);
    }
    try {
      if (dfs != null) dfs.shutdown();
    } catch (IllegalStateException t) {
      // on SIGTERM: MiniDFSCluster tries to remove a JVM shutdown hook while hooks run; harmless
      System.err.println("dfs stop (during JVM shutdown): " + t.getMessage());
    } catch (Throwable t) {
      System.err.println("dfs stop: " + t);
    }
  }

  private static void writeXml(File f, Map<String, String> props) throws IOException {
    Configuration c = new Configuration(false);
    props.forEach(c::set);
    File tmp = new File(f.getPath() + ".tmp");
    try (OutputStream out = new FileOutputStream(tmp)) {
      c.writeXml(out);
    }
    Files.move(tmp.toPath(), f.toPath(), java.nio.file.StandardCopyOption.REPLACE_EXISTING,
        java.nio.file.StandardCopyOption.ATOMIC_MOVE);
  }
}
