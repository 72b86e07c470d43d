/* Preloaded into the ranks of ci/sanitize.sh's runs, after the sanitizer's runtime:
 * dlclose() does nothing, so Open MPI's plugins (mca_*.so) stay mapped until the
 * process ends. Unloaded at MPI_Finalize, their code would show as "<unknown module>"
 * in a report (which no suppression can name), and what their globals still point to
 * would look like leaks to LeakSanitizer. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
